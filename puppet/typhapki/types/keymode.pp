# @summary The mode of the private key files, as `typhapki --key-mode` accepts it: octal,
#   readable by the owner, at most also by the group, never writable by the group nor
#   executable, nothing for others (`0600`, `0640`, `0400`, `0440`).
type Typhapki::KeyMode = Pattern[/\A0?[46][04]0\z/]
