# frozen_string_literal: true

require 'spec_helper'

describe 'typhapki' do
  let(:facts) { typhapki_os_facts.values.first }

  context 'the node configuration (typhapki::config)' do
    it { is_expected.to contain_file('/etc/typhapki/typhapki.yaml').with(mode: '0644', owner: 'root').that_requires('File[/etc/typhapki]') }
    it { is_expected.to contain_file('/etc/typhapki/cluster.yaml').with(mode: '0644').that_requires('File[/etc/typhapki]') }
    it { is_expected.to contain_file('/etc/typhapki/typhapki.yaml').with_content(%r{\A# Managed by Puppet}) }

    it 'comes before every exec that reads it' do
      ['typhapki-issue', 'typhapki-ferm', 'typhapki-restart-typha'].each do |exec|
        is_expected.to contain_exec(exec).that_requires('File[/etc/typhapki/typhapki.yaml]')
      end
    end
  end

  context 'with a key mode from hiera' do
    let(:facts) { typhapki_os_facts.values.first.merge(typhapki_spec_case: 'key_mode') }

    it 'writes values the CLI reads as text: modes keep their leading zero' do
      is_expected.to contain_file('/etc/typhapki/typhapki.yaml').with_content(%r{^    "key_mode": "0640",?$})
    end
  end
end
