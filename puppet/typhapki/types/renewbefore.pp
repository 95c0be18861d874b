# @summary How long before expiry a leaf is renewed: seconds, or minutes, hours, days or
# weeks with a unit (`3600`, `90m`, `12h`, `30d`, `2w`).
type Typhapki::RenewBefore = Pattern[/\A[1-9][0-9]*[smhdw]?\z/]
