# frozen_string_literal: true

require 'spec_helper'

describe 'typhapki' do
  let(:facts) { typhapki_os_facts.values.first }

  context 'the external fact (typhapki::fact)' do
    let(:params) { { facts_dir: '/etc/puppetlabs/facter/facts.d', config_file: '/etc/typhapki/node.yaml' } }

    it 'is an executable running `typhapki facts` with the node configuration, after it' do
      is_expected.to contain_file('/etc/puppetlabs/facter/facts.d/typhapki')
        .with(ensure: 'file', mode: '0755', owner: 'root')
        .with_content("#!/bin/sh\n# Managed by Puppet (module typhapki): the typhapki external fact. Never fails.\n" \
                      "TYPHAPKI_CONFIG=/etc/typhapki/node.yaml\nexport TYPHAPKI_CONFIG\nexec /usr/bin/typhapki facts\n")
        .that_requires('File[/etc/typhapki/node.yaml]')
    end
  end

  context 'with a path that needs quoting' do
    let(:params) { { config_file: "/etc/typhapki/it's.yaml" } }

    it { is_expected.to contain_file('/etc/facter/facts.d/typhapki').with_content(%r{^TYPHAPKI_CONFIG="/etc/typhapki/it's\.yaml"$}) }
  end
end
