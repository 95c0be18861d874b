# frozen_string_literal: true

require 'spec_helper'

# typhapki::nftables is private: compiled through typhapki (firewall_provider: nftables),
# parameters from hiera cases.
describe 'typhapki' do
  typhapki_os_facts.each do |os, os_facts|
    context "on #{os}" do
      let(:facts) { os_facts.merge(typhapki_spec_case: spec_case) }
      let(:spec_case) { 'nftables' }

      context 'with the defaults' do
        it { is_expected.to compile.with_all_deps }
        it { is_expected.to contain_class('typhapki::nftables') }
        it { is_expected.not_to contain_class('typhapki::ferm') }
        it { is_expected.not_to contain_exec('typhapki-ferm') }

        it 'renders the included file guarded by --check, every option from the node configuration' do
          is_expected.to contain_exec('typhapki-nft').with(
            command: '/usr/bin/typhapki nft',
            unless: '/usr/bin/typhapki nft --check',
            environment: ['TYPHAPKI_CONFIG=/etc/typhapki/typhapki.yaml'],
            logoutput: true,
          )
          is_expected.to contain_exec('typhapki-nft').that_requires('File[/etc/typhapki/cluster.yaml]')
          is_expected.to contain_exec('typhapki-nft').that_requires('File[/etc/typhapki/typhapki.yaml]')
        end

        it 'refreshes the live sets in one nft transaction whenever they differ from the file (issue 39)' do
          is_expected.to contain_exec('typhapki-nft-sets').with(
            command: '/usr/bin/typhapki nft --sets-only --output /etc/typhapki/calico-typha-sets.nft ' \
                     '&& if /usr/sbin/nft list set inet filter calico_typha_v4 >/dev/null 2>&1; ' \
                     'then /usr/sbin/nft -f /etc/typhapki/calico-typha-sets.nft && /usr/bin/typhapki nft --kernel; ' \
                     'else echo "typhapki: the sets are not loaded yet (no ruleset includes ' \
                     '/etc/nftables.d/calico-typha.nft): nothing to refresh"; fi',
            unless: '/usr/bin/typhapki nft --kernel',
            refreshonly: nil,
            provider: 'shell',
            environment: ['TYPHAPKI_CONFIG=/etc/typhapki/typhapki.yaml'],
          ).that_requires('Exec[typhapki-nft]')
        end

        it { is_expected.not_to contain_file('/etc/nftables.d') }

        it 'removes the rule a ferm provider left behind, and reloads ferm once without it (issue 39)' do
          is_expected.to contain_file('/etc/ferm/ferm.d/10_calico-typha').with(ensure: 'absent', backup: false)
            .that_notifies('Exec[typhapki-ferm-retired]')
          is_expected.to contain_exec('typhapki-ferm-retired').with(
            command: 'systemctl reload ferm', onlyif: 'command -v ferm', refreshonly: true, provider: 'shell',
          )
        end

        it { expect(node_config(catalogue)['commands']['nft']).to eq('output' => '/etc/nftables.d/calico-typha.nft') }
        it { expect(node_config(catalogue)['commands']).not_to have_key('ferm') }
        it { expect(node_config(catalogue)['commands']['facts']).to eq('ferm_output' => '/etc/nftables.d/calico-typha.nft') }
      end

      context 'with the cluster at a tls_stage in hiera (issue 32)' do
        let(:spec_case) { 'tls_stage' }
        let(:params) { { firewall_provider: 'nftables' } }

        it 'writes the stage into the cluster file, where `typhapki nft` reads it' do
          cluster = YAML.safe_load(catalogue.resource('File', '/etc/typhapki/cluster.yaml')[:content])
          expect(cluster.dig('kubernetes::clusters', 'main', 'staging-eqiad', 'typha', 'tls_stage')).to eq('retire')
        end

        it 'passes no port or stage of its own; a stage change is a set update like a node change' do
          expect(node_config(catalogue)['commands']['nft']).to eq('output' => '/etc/nftables.d/calico-typha.nft')
          is_expected.to contain_exec('typhapki-nft-sets').that_requires('Exec[typhapki-nft]')
        end
      end

      context 'relaxed, DNS gate warn, own port, resolvers and directory' do
        let(:spec_case) { 'nftables_relaxed' }

        it do
          expect(node_config(catalogue)['commands']['nft']).to eq(
            'output' => '/srv/nftables.d/typha.nft',
            'mode' => 'relaxed',
            'dns_gate' => 'warn',
            'port' => 5474,
            'nameserver' => ['10.3.0.1'],
          )
        end
        it { is_expected.to contain_file('/srv/nftables.d').with_ensure('directory').that_comes_before('Exec[typhapki-nft]') }
      end

      context 'with manage_ferm off' do
        let(:params) { { manage_ferm: false } }

        it { is_expected.not_to contain_class('typhapki::nftables') }
        it { expect(node_config(catalogue)['commands']).to be_nil.or(satisfy { |c| !c.key?('nft') }) }
      end

      context 'the ferm provider by default' do
        let(:spec_case) { nil }

        it { is_expected.to contain_class('typhapki::ferm') }
        it { is_expected.not_to contain_class('typhapki::nftables') }
      end

      describe 'rejects at compile time' do
        {
          'bad_firewall_provider' => %r{parameter 'firewall_provider' expects .*Typhapki::FirewallProvider.*got 'iptables'},
          'bad_nftables_mode' => %r{Class\[Typhapki::Nftables\]: parameter 'mode' expects .*Typhapki::FermMode.*got 'open'},
        }.each do |bad, message|
          context bad do
            let(:spec_case) { bad }

            it { is_expected.to compile.and_raise_error(message) }
          end
        end

        context 'on a Felix-only worker' do
          let(:params) { { role: 'felix', manage_ferm: true } }

          it { is_expected.to compile.and_raise_error(%r{typhapki::nftables protects the port of Typha.*not with role felix}) }
        end
      end
    end
  end
end
