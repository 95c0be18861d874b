# @summary A leaf's lifetime: seconds, or minutes, hours, days or weeks with a unit
# (`86400`, `90m`, `24h`, `28d`, `2w`), short of the CLI's 100 years in each unit.
type Typhapki::Lifetime = Pattern[/\A([1-9][0-9]{0,8}s?|[1-9][0-9]{0,6}m|[1-9][0-9]{0,4}h|[1-9][0-9]{0,3}d|[1-9][0-9]{0,2}w)\z/]
