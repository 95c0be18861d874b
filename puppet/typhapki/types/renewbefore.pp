# @summary How long before expiry a leaf is renewed: seconds, or minutes, hours, days or
# weeks with a unit (`3600`, `90m`, `12h`, `30d`, `2w`), short of the CLI's 100 years.
type Typhapki::RenewBefore = Pattern[/\A([1-9][0-9]{0,8}s?|[1-9][0-9]{0,6}m|[1-9][0-9]{0,4}h|[1-9][0-9]{0,3}d|[1-9][0-9]{0,2}w)\z/]
