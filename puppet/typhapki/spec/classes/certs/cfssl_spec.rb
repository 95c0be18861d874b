# frozen_string_literal: true

require 'spec_helper'

describe 'typhapki::certs::cfssl' do
  let(:pre_condition) { "class { 'typhapki': manage_certs => false }" }
  let(:facts) { typhapki_os_facts.values.first }
  let(:settings) { { 'mode' => 'cfssl', 'role' => 'both', 'cfssl_url' => 'https://cfssl.example.org:8888', 'cfssl_auth_key' => true } }
  let(:params) { { settings: settings, cfssl_auth_key: sensitive('00aa') } }

  context 'with the URL and one auth key' do
    it { is_expected.to compile.with_all_deps }
    it { is_expected.to contain_file('/etc/typhapki/cfssl-auth.key') }
    it { is_expected.not_to contain_file('/etc/typhapki/cfssl-ca.crt') }
  end

  # Without an auth key the node would ask cfssl's unauthenticated /sign, which
  # multirootca does not serve: every role needs one (Typhapki::Certs::CfsslAuth).
  {
    'without an auth key' => [{}, %r{no cfssl auth key for typha and felix \(role both\)}],
    'a Felix worker with only Typha\'s key' => [{ 'role' => 'felix', 'cfssl_auth_key_typha' => true }, %r{no cfssl auth key for felix \(role felix\)}],
  }.each do |what, (given, message)|
    context what do
      let(:settings) { super().reject { |k, _| k == 'cfssl_auth_key' }.merge(given) }
      let(:params) { { settings: settings }.merge(given.key?('cfssl_auth_key_typha') ? { cfssl_auth_key_typha: sensitive('11bb') } : {}) }

      it { is_expected.to compile.and_raise_error(message) }
    end
  end

  context 'a Felix worker with its own profile key only' do
    let(:settings) { super().reject { |k, _| k == 'cfssl_auth_key' }.merge('role' => 'felix', 'cfssl_auth_key_felix' => true) }
    let(:params) { { settings: settings, cfssl_auth_key_felix: sensitive('22cc') } }

    it { is_expected.to compile.with_all_deps }
  end

  context 'with an auth key per profile beside the shared one' do
    let(:settings) do
      super().merge('cfssl_auth_key' => true, 'cfssl_auth_key_typha' => true, 'cfssl_auth_key_felix' => true, 'cfssl_ca_cert' => "-----BEGIN CERTIFICATE-----\n")
    end
    let(:params) do
      super().merge(cfssl_auth_key: sensitive('00aa'), cfssl_auth_key_typha: sensitive('11bb'), cfssl_auth_key_felix: sensitive('22cc'))
    end

    it { is_expected.to compile.with_all_deps }
    { 'cfssl-auth.key' => '00aa', 'cfssl-auth-typha.key' => '11bb', 'cfssl-auth-felix.key' => '22cc' }.each do |file, key|
      it "writes #{file} 0600, Sensitive" do
        is_expected.to contain_file("/etc/typhapki/#{file}").with(mode: '0600', show_diff: false, backup: false)
        resource = catalogue.resource('File', "/etc/typhapki/#{file}")
        expect(resource.sensitive_parameters).to include(:content)
        expect(resource[:content]).to eq(key)
      end
    end
    it { is_expected.to contain_file('/etc/typhapki/cfssl-ca.crt').with_mode('0644') }
  end

  context 'with a client key but no client certificate path' do
    let(:settings) { super().merge('cfssl_client_cert' => 'puppet', 'cfssl_client_key' => '/etc/k.pem') }

    it { is_expected.to compile.and_raise_error(%r{cfssl_client_key goes with a cfssl_client_cert path}) }
  end

  context 'with a client certificate path but no key' do
    let(:settings) { super().merge('cfssl_client_cert' => '/etc/pki/node.pem') }

    it { is_expected.to compile.and_raise_error(%r{cfssl_client_key goes with a cfssl_client_cert path}) }
  end

  context 'with a plain-text URL scheme it cannot use' do
    let(:settings) { super().merge('cfssl_url' => 'ftp://cfssl.example.org') }

    it { is_expected.to compile.and_raise_error(%r{entry 'cfssl_url' expects a match for Typhapki::CfsslUrl}) }
  end
end
