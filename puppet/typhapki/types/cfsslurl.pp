# @summary cfssl's URL, as `typhapki --cfssl-url` accepts it without
#   `--cfssl-allow-http` (a flag only): `https://HOST[:PORT][/PREFIX]`, or plain `http://`
#   to a loopback address (a local multirootca behind its own TLS front); no
#   credentials, query or fragment.
type Typhapki::CfsslUrl = Pattern[
  /\Ahttps:\/\/([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?(\/[^?#@\s]*)?\z/,
  /\Ahttp:\/\/(localhost|127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|\[::1\])(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?(\/[^?#@\s]*)?\z/,
]
