# frozen_string_literal: true

require 'spec_helper'

# typhapki::ferm is private: compiled through typhapki, parameters from hiera cases.
describe 'typhapki' do
  typhapki_os_facts.each do |os, os_facts|
    context "on #{os}" do
      let(:facts) { os_facts.merge(typhapki_spec_case: spec_case) }
      let(:spec_case) { nil }

      context 'with the defaults' do
        it { is_expected.to compile.with_all_deps }

        it 'renders the rule guarded by --check, every option from the node configuration' do
          is_expected.to contain_exec('typhapki-ferm').with(
            command: '/usr/bin/typhapki ferm',
            unless: '/usr/bin/typhapki ferm --check',
            environment: ['TYPHAPKI_CONFIG=/etc/typhapki/typhapki.yaml'],
            logoutput: true,
          )
        end

        it 'reads the cluster entry the server wrote to the node' do
          is_expected.to contain_exec('typhapki-ferm').that_requires('File[/etc/typhapki/cluster.yaml]')
          is_expected.to contain_exec('typhapki-ferm').that_requires('File[/etc/typhapki/typhapki.yaml]')
        end

        it 'reloads whenever the kernel differs from the file, not only when Puppet wrote it (issue 39)' do
          is_expected.to contain_exec('typhapki-ferm-reload').with(
            command: 'systemctl reload ferm && /usr/bin/typhapki ferm --kernel',
            unless: '/usr/bin/typhapki ferm --kernel',
            refreshonly: nil,
            provider: 'shell',
            environment: ['TYPHAPKI_CONFIG=/etc/typhapki/typhapki.yaml'],
          ).that_requires('Exec[typhapki-ferm]')
        end
        it { is_expected.not_to contain_file('/etc/ferm/ferm.d') }
        it { expect(node_config(catalogue)['commands']['ferm']).to eq('output' => '/etc/ferm/ferm.d/10_calico-typha') }
        it { expect(node_config(catalogue)['commands']['facts']).to eq('ferm_output' => '/etc/ferm/ferm.d/10_calico-typha') }
      end

      context 'relaxed, function style, DNS gate warn, own resolvers and reload' do
        let(:spec_case) { 'ferm_relaxed' }
        let(:params) { { options: { 'timeout' => 3 } } }

        it do
          expect(node_config(catalogue)['commands']['ferm']).to eq(
            'output' => '/etc/ferm/ferm.d/10_calico-typha',
            'mode' => 'relaxed',
            'style' => 'function',
            'dns_gate' => 'warn',
            'nameserver' => ['10.3.0.1', '10.3.0.2:5353'],
          )
        end
        it { is_expected.to contain_exec('typhapki-ferm-reload').with_command('/usr/sbin/ferm /etc/ferm/ferm.conf && /usr/bin/typhapki ferm --kernel') }
      end

      context 'creating the directory of the rule' do
        let(:spec_case) { 'ferm_dir' }

        it { is_expected.to contain_file('/srv/ferm/conf.d').with_ensure('directory').that_comes_before('Exec[typhapki-ferm]') }
        it { expect(node_config(catalogue)['commands']['facts']).to eq('ferm_output' => '/srv/ferm/conf.d/10_typha') }
      end

      context 'with the cluster at a tls_stage in hiera (issue 32)' do
        let(:spec_case) { 'tls_stage' }

        it 'writes the stage into the cluster file, where `typhapki ferm` reads it' do
          cluster = YAML.safe_load(catalogue.resource('File', '/etc/typhapki/cluster.yaml')[:content])
          expect(cluster.dig('kubernetes::clusters', 'main', 'staging-eqiad', 'typha', 'tls_stage')).to eq('retire')
          expect(cluster.dig('kubernetes::clusters_defaults', 'typha', 'tls_stage')).to eq('parallel')
          expect(cluster['kubernetes::clusters']['main'].keys).to eq(['staging-eqiad'])
        end

        it 'passes no port or stage of its own: the cluster file is the one place for the stage' do
          expect(node_config(catalogue)['commands']['ferm']).to eq('output' => '/etc/ferm/ferm.d/10_calico-typha')
          is_expected.to contain_exec('typhapki-ferm').with_command('/usr/bin/typhapki ferm')
        end
      end

      describe 'rejects at compile time' do
        {
          'bad_ferm_mode' => %r{Class\[Typhapki::Ferm\]: parameter 'mode' expects .*Typhapki::FermMode.*got 'loose'},
          'bad_nameserver' => %r{Class\[Typhapki::Ferm\]: parameter 'nameservers' index 0 expects a Typhapki::Nameserver},
        }.each do |bad, message|
          context bad do
            let(:spec_case) { bad }

            it { is_expected.to compile.and_raise_error(message) }
          end
        end
      end
    end
  end
end
