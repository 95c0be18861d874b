# frozen_string_literal: true

require 'spec_helper'

# typhapki::certs is private: it is compiled through typhapki, its parameters bound
# from hiera (one fixture file per case, spec/fixtures/hiera/data/cases).
describe 'typhapki' do
  typhapki_os_facts.each do |os, os_facts|
    context "on #{os}" do
      let(:facts) { os_facts.merge(typhapki_spec_case: spec_case) }
      let(:spec_case) { nil }
      let(:env) { ['TYPHAPKI_CONFIG=/etc/typhapki/typhapki.yaml'] }

      shared_examples 'a guarded exec with restarts' do |command, components|
        it { is_expected.to compile.with_all_deps }

        it 'runs the command only when check finds the set wrong, with the same options' do
          is_expected.to contain_exec('typhapki-issue').with(
            command: command,
            unless: '/usr/bin/typhapki check --quiet',
            environment: env,
            logoutput: true,
          )
        end

        components.each do |component|
          it "restarts #{component} only while its marker exists, after the exec" do
            is_expected.to contain_exec("typhapki-restart-#{component}").with(
              onlyif: "test -e /var/lib/typhapki/.restart-#{component}",
              provider: 'shell',
              environment: env,
            ).with_command("/usr/bin/typhapki restart-typha --kubeconfig /etc/kubernetes/kubelet.conf && /usr/bin/typhapki restarted --component #{component}")
              .that_requires('Exec[typhapki-issue]')
          end
        end
        (['typha', 'felix'] - components).each do |component|
          it { is_expected.not_to contain_exec("typhapki-restart-#{component}") }
        end
      end

      context 'mode local, CA from the server' do
        let(:spec_case) { 'local_ca' }

        it_behaves_like 'a guarded exec with restarts', '/usr/bin/typhapki issue', ['typha']
        it { is_expected.to contain_file('/etc/typhapki/ca').with(ensure: 'directory', mode: '0700') }
        it { is_expected.to contain_file('/etc/typhapki/ca/typhaca.crt').with_mode('0644').that_comes_before('Exec[typhapki-issue]') }

        it 'gives issue and check the per-role lifetimes through the node configuration' do
          expect(node_config(catalogue)['defaults']).to include('typha_lifetime' => '28d', 'felix_lifetime' => '24h')
          expect(node_config(catalogue)['defaults']).not_to have_key('days')
        end

        it 'ships the CA key as Sensitive, never diffed nor backed up' do
          is_expected.to contain_file('/etc/typhapki/ca/typhaca.key')
            .with(mode: '0600', show_diff: false, backup: false)
            .that_comes_before('Exec[typhapki-issue]')
          key = catalogue.resource('File', '/etc/typhapki/ca/typhaca.key')
          expect(key.sensitive_parameters).to include(:content)
          expect(key[:content]).to include('SECRET')
        end

        it { is_expected.not_to contain_exec('typhapki-ca-init') }
        it { is_expected.to contain_file('/etc/typhapki/trust-0.crt').that_comes_before('Exec[typhapki-issue]') }
        it { expect(node_config(catalogue)['defaults']).to include('ca_dir' => '/etc/typhapki/ca', 'trust' => ['/etc/typhapki/trust-0.crt']) }
        it { expect(node_config(catalogue)['defaults']).not_to have_key('signer') }
      end

      context 'mode local, with the new CA of the emergency CA roll' do
        let(:spec_case) { 'local_ca_emergency' }

        it_behaves_like 'a guarded exec with restarts', '/usr/bin/typhapki issue', ['typha']
        it { is_expected.to contain_file('/etc/typhapki/ca-new').with(ensure: 'directory', mode: '0700') }
        it { is_expected.to contain_file('/etc/typhapki/ca-new/typhaca.crt').with_mode('0644').that_comes_before('Exec[typhapki-issue]') }
        it { expect(node_config(catalogue)['defaults']).to include('ca_dir' => '/etc/typhapki/ca', 'new_ca_dir' => '/etc/typhapki/ca-new') }

        it 'ships the new CA key as Sensitive, never diffed nor backed up' do
          is_expected.to contain_file('/etc/typhapki/ca-new/typhaca.key')
            .with(mode: '0600', show_diff: false, backup: false)
            .that_comes_before('Exec[typhapki-issue]')
          key = catalogue.resource('File', '/etc/typhapki/ca-new/typhaca.key')
          expect(key.sensitive_parameters).to include(:content)
        end
      end

      context 'mode local, a lab CA made on the node' do
        it_behaves_like 'a guarded exec with restarts', '/usr/bin/typhapki issue', ['typha']
        it do
          is_expected.to contain_exec('typhapki-ca-init')
            .with_command('/usr/bin/typhapki ca init --ca-dir /etc/typhapki/ca')
            .with_creates('/etc/typhapki/ca/typhaca.crt')
            .that_comes_before('Exec[typhapki-issue]')
        end
      end

      context 'mode shipped, a Typha host' do
        let(:spec_case) { 'shipped' }

        it_behaves_like 'a guarded exec with restarts', '/usr/bin/typhapki install --from /etc/typhapki/shipped', ['typha']

        {
          'calico-typha-ca/typhaca.crt' => '0644',
          'calico-typha-certs/typha.crt' => '0644',
          'calico-typha-certs/typha.key' => '0600',
          'calico-node-certs/calico-node.crt' => '0644',
          'calico-node-certs/calico-node.key' => '0600',
        }.each do |file, mode|
          it "stages #{file} in the layout issue writes, before the guarded install" do
            is_expected.to contain_file("/etc/typhapki/shipped/#{file}")
              .with(mode: mode, show_diff: false, backup: false)
              .that_comes_before('Exec[typhapki-issue]')
          end
        end
        it { is_expected.to contain_file('/etc/typhapki/shipped').with(ensure: 'directory', mode: '0700') }
        it { expect(catalogue.resource('File', '/etc/typhapki/shipped/calico-typha-certs/typha.key').sensitive_parameters).to include(:content) }
        it { expect(catalogue.resource('File', '/etc/typhapki/shipped/calico-typha-certs/typha.crt').sensitive_parameters).not_to include(:content) }

        it 'lets check judge the live set against the shipped one (no refresh-only install)' do
          expect(node_config(catalogue)['defaults']['from']).to eq('/etc/typhapki/shipped')
          is_expected.not_to contain_exec('typhapki-install-shipped')
        end
        it { is_expected.not_to contain_file('/etc/typhapki/ca') }
        it { expect(node_config(catalogue)['defaults']).not_to have_key('ca_dir') }
      end

      context 'mode shipped, a worker with Felix only' do
        let(:spec_case) { 'shipped_felix' }

        it_behaves_like 'a guarded exec with restarts', '/usr/bin/typhapki install --from /etc/typhapki/shipped', []
        it { is_expected.not_to contain_file('/etc/typhapki/shipped/calico-typha-certs') }
        it { is_expected.to contain_file('/etc/typhapki/shipped/calico-node-certs/calico-node.key') }
      end

      context 'mode cfssl' do
        let(:spec_case) { 'cfssl' }

        it_behaves_like 'a guarded exec with restarts', '/usr/bin/typhapki issue', ['typha']

        it 'gives issue and check the cfssl settings through the node configuration' do
          expect(node_config(catalogue)['defaults']).to include(
            'signer' => 'cfssl',
            'cfssl_url' => 'http://127.0.0.1:8888',
            'cfssl_auth_key' => '/etc/typhapki/cfssl-auth.key',
            'cfssl_ca_file' => '/etc/typhapki/cfssl-ca.crt',
            'cfssl_profile_typha' => 'typha',
            'cfssl_profile_felix' => 'felix',
            'cfssl_label' => 'primary',
            'cfssl_auth_key_typha' => '/etc/typhapki/cfssl-auth-typha.key',
          )
          expect(node_config(catalogue)['defaults']).not_to have_key('ca_dir')
          expect(node_config(catalogue)['defaults']).not_to have_key('cfssl_auth_key_felix')
        end

        it 'keeps the auth key out of the configuration, in a Sensitive 0600 file' do
          expect(catalogue.resource('File', '/etc/typhapki/typhapki.yaml')[:content]).not_to include('0123456789abcdef')
          expect(catalogue.resource('File', '/etc/typhapki/typhapki.yaml')[:content]).not_to include('fedcba9876543210')
          expect(catalogue.resource('File', '/etc/typhapki/cfssl-auth-typha.key').sensitive_parameters).to include(:content)
          expect(catalogue.resource('File', '/etc/typhapki/cfssl-auth.key').sensitive_parameters).to include(:content)
          is_expected.to contain_file('/etc/typhapki/cfssl-auth.key')
            .with(mode: '0600', show_diff: false, backup: false)
            .that_comes_before('Exec[typhapki-issue]')
        end
        it { is_expected.to contain_file('/etc/typhapki/cfssl-ca.crt').that_comes_before('Exec[typhapki-issue]') }
      end

      context 'mode cfssl and its URL from the cluster\'s typha: mapping' do
        let(:spec_case) { 'cfssl_mapping' }

        it_behaves_like 'a guarded exec with restarts', '/usr/bin/typhapki issue', ['typha']

        it 'names the signer and leaves the URL to cluster.yaml, where the CLI reads it' do
          expect(node_config(catalogue)['defaults']).to include('signer' => 'cfssl', 'hiera' => '/etc/typhapki/cluster.yaml')
          expect(node_config(catalogue)['defaults']).not_to have_key('cfssl_url')
          cluster = YAML.safe_load(catalogue.resource('File', '/etc/typhapki/cluster.yaml')[:content])
          expect(cluster.dig('kubernetes::clusters', 'main', 'staging-eqiad', 'typha', 'cfssl_url')).to eq('https://pki.example.org:8888')
        end
        it { is_expected.to contain_file('/etc/typhapki/cfssl-auth.key') }
      end

      context 'mode cfssl from the mapping, its URL overridden by the parameter' do
        let(:spec_case) { 'cfssl_mapping_overridden' }

        it { is_expected.to compile.with_all_deps }
        it { expect(node_config(catalogue)['defaults']).to include('signer' => 'cfssl', 'cfssl_url' => 'https://other-pki.example.org:8888') }
      end

      context 'mode local although the mapping names cfssl' do
        let(:spec_case) { 'cfssl_mapping_local' }

        it { is_expected.to compile.with_all_deps }
        it { is_expected.to contain_exec('typhapki-ca-init') }
        it 'tells the CLI to sign locally, as a flag would over hiera' do
          expect(node_config(catalogue)['defaults']).to include('signer' => 'local', 'ca_dir' => '/etc/typhapki/ca')
          expect(node_config(catalogue)['defaults']).not_to have_key('cfssl_url')
        end
      end

      context 'mode cfssl, the Puppet agent certificate as the node identity' do
        let(:spec_case) { 'cfssl_puppet' }

        it 'writes the agent\'s own paths, by its certname, into the node configuration' do
          certname = catalogue.to_resource.name
          expect(node_config(catalogue)['defaults']).to include(
            'cfssl_client_cert' => "/srv/puppet-ssl/certs/#{certname}.pem",
            'cfssl_client_key' => "/srv/puppet-ssl/private_keys/#{certname}.pem",
            'cfssl_ca_file' => '/srv/puppet-ssl/certs/ca.pem',
          )
        end
      end

      context 'paused (during a CA rotation)' do
        let(:spec_case) { 'paused' }

        it { is_expected.to compile.with_all_deps }
        it { is_expected.not_to contain_exec('typhapki-issue') }
        it { is_expected.to contain_exec('typhapki-restart-typha') }
        it { is_expected.not_to contain_exec('typhapki-restart-felix') }
      end

      context 'Typha restarted through the eviction API' do
        let(:spec_case) { 'restart_eviction' }

        it { is_expected.to compile.with_all_deps }
        it 'evicts only while the marker exists, then clears it' do
          is_expected.to contain_exec('typhapki-restart-typha').with(
            onlyif: 'test -e /var/lib/typhapki/.restart-typha',
            command: '/usr/bin/typhapki restart-typha --kubeconfig /etc/kubernetes/kubelet.conf && /usr/bin/typhapki restarted --component typha',
            environment: env,
          ).that_requires('Exec[typhapki-issue]')
        end
        it { is_expected.not_to contain_exec('typhapki-restart-felix') }
      end

      context 'without restart commands' do
        let(:spec_case) { 'no_restarts' }

        it { is_expected.to compile.with_all_deps }
        it { is_expected.not_to contain_typhapki__restart('typha') }
        it { is_expected.not_to contain_typhapki__restart('felix') }
      end

      describe 'rejects at compile time' do
        {
          # The mode class's Struct type (types/certs/) names the hiera key at fault.
          'bad_stray_cfssl' => %r{Class\[Typhapki::Certs::Local\]:\n.*variant 0 unrecognized key 'cfssl_url'},
          'bad_shipped_missing' => %r{Class\[Typhapki::Certs::Shipped\]:\n\s+parameter 'settings' variant 0 expects a value for key 'shipped_typha_cert'\n\s+parameter 'settings' variant 0 expects a value for key 'shipped_typha_key'},
          'bad_shipped_extra' => %r{variant 2 unrecognized key 'shipped_typha_cert'\n\s+parameter 'settings' variant 2 unrecognized key 'shipped_typha_key'},
          # The hiera keys to set, the cluster's mapping first.
          'bad_cfssl_no_url' => %r{typhapki::certs: mode cfssl needs cfssl's URL: set cfssl_url in the typha: mapping of cluster 'staging-eqiad' in kubernetes::clusters, or typhapki::certs::cfssl_url},
          # Every role needs an auth key (Typhapki::Certs::CfsslAuth, generated).
          'bad_cfssl_no_auth' => %r{typhapki::certs: mode cfssl: no cfssl auth key for typha and felix \(role both\): set typhapki::certs::cfssl_auth_key \(both profiles\) or typhapki::certs::cfssl_auth_key_typha and typhapki::certs::cfssl_auth_key_felix},
          'bad_cfssl_half_auth' => %r{typhapki::certs: mode cfssl: no cfssl auth key for felix \(role both\): set typhapki::certs::cfssl_auth_key \(both profiles\) or typhapki::certs::cfssl_auth_key_felix },
          'bad_cfssl_mapping_url' => %r{typhapki::certs: kubernetes::clusters\.main\.staging-eqiad\.typha\.cfssl_url: expected https://HOST\[:PORT\] \(plain http:// to loopback only\), got 'ftp://pki' \(or set typhapki::certs::cfssl_url\)},
          'bad_ca_half' => %r{variant 0 unrecognized key 'ca_cert'\n\s+parameter 'settings' variant 1 expects a value for key 'ca_key'},
          'bad_stray_secret' => %r{Class\[Typhapki::Certs::Cfssl\]: parameter 'settings' unrecognized key 'ca_key'},
          'bad_mode' => %r{Class\[Typhapki::Certs\]: parameter 'mode' expects a match for Typhapki::Mode = Enum\['cfssl', 'local', 'shipped'\], got 'vault'},
          'bad_key_type' => %r{Class\[Typhapki::Certs\]: parameter 'key_type' expects a match for Typhapki::KeyType.*got 'dsa-1024'},
          'bad_new_ca_half' => %r{Class\[Typhapki::Certs::Local\]:.*expects a value for key 'new_ca_key'}m,
          # The emergency CA roll runs on the central signer (docs/rotation.md).
          'bad_shipped_emergency' => %r{typhapki::certs: kubernetes::clusters\.main\.staging-eqiad\.typha\.emergency: shipped sets are made on the admin host: run the emergency's steps there, on the central signer},
        }.each do |bad, message|
          context bad do
            let(:spec_case) { bad }

            it { is_expected.to compile.and_raise_error(message) }
          end
        end
      end
    end
  end

  context 'declared directly' do
    let(:pre_condition) { "class { 'typhapki::certs': mode => 'local' }" }
    let(:facts) { typhapki_os_facts.values.first }

    it { is_expected.to compile.and_raise_error(%r{declare class typhapki \(typhapki::manage_certs\) instead}) }
  end
end
