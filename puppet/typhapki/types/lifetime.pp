# @summary A leaf's lifetime: seconds, or minutes, hours, days or weeks with a unit
# (`86400`, `90m`, `24h`, `28d`, `2w`).
type Typhapki::Lifetime = Pattern[/\A[1-9][0-9]*[smhdw]?\z/]
