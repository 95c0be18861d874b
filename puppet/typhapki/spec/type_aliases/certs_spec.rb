# frozen_string_literal: true

require 'spec_helper'

# The settings struct of each issuance mode (types/certs/), with values it accepts and
# rejects: a parameter of another mode, one missing for the role, a key without its cert.
pem = "-----BEGIN CERTIFICATE-----\nMIIB\n"
local = { 'mode' => 'local', 'role' => 'both', 'ca_dir' => '/etc/typhapki/ca' }
shipped = { 'mode' => 'shipped', 'shipped_dir' => '/etc/typhapki/shipped', 'shipped_bundle' => pem }
typha = { 'shipped_typha_cert' => pem, 'shipped_typha_key' => true }
felix = { 'shipped_felix_cert' => pem, 'shipped_felix_key' => true }
cfssl = { 'mode' => 'cfssl', 'role' => 'felix', 'cfssl_url' => 'https://cfssl.example.org:8888' }
cfssl_all = cfssl.merge(
  'cfssl_auth_key' => true, 'cfssl_auth_key_typha' => true, 'cfssl_auth_key_felix' => true,
  'cfssl_ca_cert' => pem, 'cfssl_profile_typha' => 'typha', 'cfssl_profile_felix' => 'felix', 'cfssl_label' => 'primary'
)
good = {
  'Typhapki::Certs::Local' => [local, local.merge('ca_cert' => pem, 'ca_key' => true)],
  'Typhapki::Certs::Shipped' => [
    shipped.merge('role' => 'both').merge(typha).merge(felix),
    shipped.merge('role' => 'typha').merge(typha),
    shipped.merge('role' => 'felix').merge(felix),
  ],
  'Typhapki::Certs::Cfssl' => [cfssl, cfssl_all, cfssl.merge('cfssl_url' => 'http://127.0.0.1:8888')],
}
bad = {
  'Typhapki::Certs::Local' => [
    local.merge('ca_cert' => pem), local.merge('ca_key' => true), local.merge('ca_cert' => pem, 'ca_key' => false),
    local.merge('cfssl_url' => 'http://127.0.0.1:8888'), local.merge('ca_dir' => 'ca'), local.reject { |k, _| k == 'ca_dir' },
    local.merge('mode' => 'cfssl'), local.merge('role' => 'all'),
  ],
  'Typhapki::Certs::Shipped' => [
    shipped.merge('role' => 'both').merge(felix),
    shipped.merge('role' => 'felix').merge(felix).merge(typha),
    shipped.merge('role' => 'typha').merge(typha).merge('shipped_typha_key' => false),
    shipped.merge('role' => 'felix', 'shipped_felix_cert' => pem),
    shipped.merge('role' => 'felix').merge(felix).reject { |k, _| k == 'shipped_bundle' },
    shipped.merge('role' => 'felix').merge(felix).merge('ca_key' => true),
  ],
  'Typhapki::Certs::Cfssl' => [
    cfssl.reject { |k, _| k == 'cfssl_url' }, cfssl.merge('cfssl_url' => 'cfssl.example.org:8888'),
    cfssl.merge('ca_dir' => '/etc/typhapki/ca'), cfssl.merge('cfssl_auth_key' => 'deadbeef'),
    cfssl.merge('cfssl_label' => ''), cfssl.merge('shipped_bundle' => pem),
  ],
}
good['Typhapki::Certs::Settings'] = good.values.flatten
bad['Typhapki::Certs::Settings'] = bad.values.flatten + [{}, local.merge('mode' => 'vault')]

good.each_key do |type|
  describe type do
    good[type].each do |value|
      it { is_expected.to allow_value(value) }
    end
    bad[type].each do |value|
      it { is_expected.not_to allow_value(value) }
    end
  end
end

# The cfssl auth keys of a node's roles (types/certs/cfsslauth.pp, generated): one for
# both profiles, or one per role the node holds.
describe 'Typhapki::Certs::CfsslAuth' do
  [
    { 'role' => 'both', 'cfssl_auth_key' => true },
    { 'role' => 'felix', 'cfssl_auth_key' => true, 'cfssl_auth_key_typha' => true },
    { 'role' => 'typha', 'cfssl_auth_key_typha' => true },
    { 'role' => 'felix', 'cfssl_auth_key_felix' => true },
    { 'role' => 'both', 'cfssl_auth_key_typha' => true, 'cfssl_auth_key_felix' => true },
  ].each do |value|
    it { is_expected.to allow_value(value) }
  end
  [
    { 'role' => 'both' }, { 'role' => 'typha' }, { 'role' => 'felix', 'cfssl_auth_key_typha' => true },
    { 'role' => 'both', 'cfssl_auth_key_typha' => true }, { 'role' => 'both', 'cfssl_auth_key' => false },
    { 'role' => 'all', 'cfssl_auth_key' => true },
  ].each do |value|
    it { is_expected.not_to allow_value(value) }
  end
end
