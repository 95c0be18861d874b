# frozen_string_literal: true

require 'spec_helper'

# The private mode class, declared with its settings as typhapki::certs declares it
# (typhapki itself without certs, for the paths the class reads).
describe 'typhapki::certs::local' do
  let(:pre_condition) { "class { 'typhapki': manage_certs => false }" }
  let(:facts) { typhapki_os_facts.values.first }
  let(:settings) { { 'mode' => 'local', 'role' => 'both', 'ca_dir' => '/srv/ca' } }
  let(:params) { { settings: settings } }

  context 'with the CA from the server' do
    let(:settings) { super().merge('ca_cert' => "-----BEGIN CERTIFICATE-----\n", 'ca_key' => true) }
    let(:params) { super().merge(ca_key: sensitive("-----BEGIN PRIVATE KEY-----\nSECRET\n")) }

    it { is_expected.to compile.with_all_deps }
    it { is_expected.to contain_file('/srv/ca').with(ensure: 'directory', mode: '0700') }
    it { is_expected.to contain_file('/srv/ca/typhaca.crt').with(mode: '0644', content: "-----BEGIN CERTIFICATE-----\n") }
    it { is_expected.to contain_file('/srv/ca/typhaca.key').with(mode: '0600', show_diff: false, backup: false) }
    it { expect(catalogue.resource('File', '/srv/ca/typhaca.key').sensitive_parameters).to include(:content) }
    it { is_expected.not_to contain_exec('typhapki-ca-init') }
  end

  context 'without a CA: a lab CA made on the node' do
    it { is_expected.to compile.with_all_deps }
    it { is_expected.to contain_exec('typhapki-ca-init').with_command('/usr/bin/typhapki ca init --ca-dir /srv/ca').with_creates('/srv/ca/typhaca.crt') }
    it { is_expected.not_to contain_file('/srv/ca/typhaca.key') }
  end

  context 'with settings that name a key it is not given' do
    let(:settings) { super().merge('ca_cert' => "-----BEGIN CERTIFICATE-----\n", 'ca_key' => true) }

    it { is_expected.to compile.and_raise_error(%r{expects a Sensitive\[String\] value, got Undef}) }
  end

  context 'with settings of another mode' do
    let(:settings) { super().merge('cfssl_url' => 'http://127.0.0.1:8888') }

    it { is_expected.to compile.and_raise_error(%r{unrecognized key 'cfssl_url'}) }
  end

  context 'with a secret of another mode' do
    let(:params) { super().merge(cfssl_auth_key: sensitive('0123')) }

    it { is_expected.to compile.and_raise_error(%r{has no parameter named 'cfssl_auth_key'}) }
  end
end
