# frozen_string_literal: true

require 'spec_helper'

describe 'typhapki::certs::shipped' do
  let(:pre_condition) { "class { 'typhapki': manage_certs => false }" }
  let(:facts) { typhapki_os_facts.values.first }
  let(:pem) { "-----BEGIN CERTIFICATE-----\nMIIB\n" }
  let(:typha) { { 'shipped_typha_cert' => pem, 'shipped_typha_key' => true } }
  let(:felix) { { 'shipped_felix_cert' => pem, 'shipped_felix_key' => true } }
  let(:base) { { 'mode' => 'shipped', 'shipped_dir' => '/srv/shipped', 'shipped_bundle' => pem } }
  let(:keys) { { shipped_typha_key: sensitive('TYPHA SECRET'), shipped_felix_key: sensitive('FELIX SECRET') } }

  {
    'both' => ['calico-typha-certs', 'calico-node-certs'],
    'typha' => ['calico-typha-certs'],
    'felix' => ['calico-node-certs'],
  }.each do |role, dirs|
    context "role #{role}" do
      let(:settings) do
        base.merge('role' => role).merge(dirs.include?('calico-typha-certs') ? typha : {}).merge(dirs.include?('calico-node-certs') ? felix : {})
      end
      let(:params) do
        { settings: settings }.merge(keys.select { |name, _| settings.key?(name.to_s) })
      end

      it { is_expected.to compile.with_all_deps }
      it { is_expected.to contain_file('/srv/shipped/calico-typha-ca/typhaca.crt').with(mode: '0644', content: pem) }
      it { expect(catalogue.resources.select { |r| r.type == 'File' && r.title.end_with?('.key') }.map(&:title).sort).to eq(dirs.map { |d| "/srv/shipped/#{d}/#{d == 'calico-node-certs' ? 'calico-node' : 'typha'}.key" }.sort) }

      dirs.each do |dir|
        it { is_expected.to contain_file("/srv/shipped/#{dir}").with(ensure: 'directory', mode: '0700') }
      end
      (['calico-typha-certs', 'calico-node-certs'] - dirs).each do |dir|
        it { is_expected.not_to contain_file("/srv/shipped/#{dir}") }
      end
      it 'stages each key 0600 and Sensitive' do
        catalogue.resources.select { |r| r.type == 'File' && r.title.end_with?('.key') }.each do |key|
          expect(key[:mode]).to eq('0600')
          expect(key.sensitive_parameters).to include(:content)
        end
      end
    end
  end

  context 'a felix worker given a Typha certificate' do
    let(:params) { { settings: base.merge('role' => 'felix').merge(felix).merge(typha) }.merge(keys) }

    it { is_expected.to compile.and_raise_error(%r{variant 2 unrecognized key 'shipped_typha_cert'}) }
  end
end
