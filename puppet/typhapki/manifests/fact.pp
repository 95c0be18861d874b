# @summary The `typhapki` external fact: a facts.d executable running `typhapki facts`.
#
# The fact reads the node configuration file like every other command, so the
# executable passes no options; it never fails the Facter run.
#
# No parameters of its own: it reads `typhapki::facts_dir`, `typhapki::bin` and
# `typhapki::config_file`; `typhapki::manage_fact` switches it.
#
# @api private
class typhapki::fact {
  assert_private()

  # Neither Debian nor Facter creates facts.d (nor /etc/facter): a fresh node converges
  # in one run only if the module makes what it writes into.
  $dirs = [dirname($typhapki::facts_dir), $typhapki::facts_dir]
  ensure_resource('file', $dirs, { 'ensure' => 'directory', 'owner' => 'root', 'group' => 'root', 'mode' => '0755' })

  file { "${typhapki::facts_dir}/typhapki":
    ensure  => file,
    owner   => 'root',
    group   => 'root',
    mode    => '0755',
    content => epp('typhapki/fact.sh.epp', {
        'bin'         => $typhapki::bin,
        'config_file' => $typhapki::config_file,
    }),
  }
}
