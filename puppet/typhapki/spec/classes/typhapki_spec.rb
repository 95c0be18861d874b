# frozen_string_literal: true

require 'spec_helper'

describe 'typhapki' do
  typhapki_os_facts.each do |os, os_facts|
    context "on #{os}" do
      let(:facts) { os_facts }

      context 'with the module defaults (a Typha host, local CA made on the node)' do
        it { is_expected.to compile.with_all_deps }
        it { is_expected.to contain_class('typhapki::install').that_comes_before('Class[typhapki::config]') }
        it { is_expected.to contain_class('typhapki::config').that_comes_before('Class[typhapki::certs]') }
        it { is_expected.to contain_class('typhapki::config').that_comes_before('Class[typhapki::ferm]') }
        it { is_expected.to contain_class('typhapki::config').that_comes_before('Class[typhapki::fact]') }
        it { is_expected.to contain_package('typhapki').with_ensure('installed') }
        it { is_expected.to contain_file('/etc/typhapki').with_ensure('directory') }
        it { is_expected.to contain_file('/var/lib/typhapki').with_ensure('directory') }

        it 'writes only its own cluster, looked up on the server, to the node' do
          data = YAML.safe_load(catalogue.resource('File', '/etc/typhapki/cluster.yaml')[:content])
          expect(data).to eq(
            'kubernetes::clusters_defaults' => { 'typha' => { 'days' => 90 } },
            'kubernetes::clusters' => {
              'main' => {
                'staging-eqiad' => {
                  'cluster_nodes' => ['kubestage1001.eqiad.wmnet', 'kubestage1002.eqiad.wmnet'],
                  'typha' => { 'typha_cn' => 'typha-staging' },
                },
              },
            },
          )
        end

        it 'writes the node configuration the CLI reads as its defaults' do
          expect(node_config(catalogue)).to eq(
            'version' => 1,
            'defaults' => {
              'out' => '/var/lib/typhapki',
              'role' => 'both',
              'hiera' => '/etc/typhapki/cluster.yaml',
              'cluster' => 'staging-eqiad',
              'ca_dir' => '/etc/typhapki/ca',
              # The uid/gid the wiring runs Typha as (docs/kubernetes.md).
              'key_owner' => '10001',
              'key_group' => '10001',
            },
            'commands' => {
              'ferm' => { 'output' => '/etc/ferm/ferm.d/10_calico-typha' },
              'facts' => { 'ferm_output' => '/etc/ferm/ferm.d/10_calico-typha' },
              'metrics' => { 'textfile_dir' => '/var/lib/prometheus/node-exporter' },
            },
          )
        end

        it 'installs the fact, which reads the same file' do
          is_expected.to contain_file('/etc/facter/facts.d/typhapki')
            .with_mode('0755')
            .with_content(%r{^TYPHAPKI_CONFIG=/etc/typhapki/typhapki\.yaml$})
            .with_content(%r{^exec /usr/bin/typhapki facts$})
        end
      end

      context 'without the package (the tool comes from elsewhere)' do
        let(:params) { { manage_package: false, bin: '/opt/typhapki/bin/typhapki' } }

        it { is_expected.not_to contain_package('typhapki') }
        it { is_expected.to contain_exec('typhapki-issue').with_command('/opt/typhapki/bin/typhapki issue') }
        it { is_expected.to contain_file('/etc/facter/facts.d/typhapki').with_content(%r{^exec /opt/typhapki/bin/typhapki facts$}) }
      end

      context 'on a worker that does not run Typha (role felix)' do
        let(:params) { { role: 'felix' } }

        it { is_expected.to compile.with_all_deps }
        it { is_expected.not_to contain_class('typhapki::ferm') }
        it { is_expected.not_to contain_exec('typhapki-restart-felix') }
        it { is_expected.not_to contain_exec('typhapki-restart-typha') }
        it { expect(node_config(catalogue)['defaults']['role']).to eq('felix') }
        it { expect(node_config(catalogue)['commands'].keys).to eq(['metrics']) }
      end

      context 'without a cluster' do
        let(:facts) { os_facts.merge(typhapki_spec_case: 'no_cluster') }

        it { is_expected.to compile.with_all_deps }
        it { is_expected.not_to contain_class('typhapki::ferm') }
        it { is_expected.not_to contain_file('/etc/typhapki/cluster.yaml') }
        it { expect(node_config(catalogue)['defaults'].keys).to contain_exactly('out', 'role', 'ca_dir', 'key_owner', 'key_group') }
      end

      context 'with other paths and extra options' do
        let(:params) do
          {
            config_file: '/srv/t/typhapki.yaml', out: '/srv/t/out', state_dir: '/srv/t/state',
            facts_dir: '/srv/t/facts.d', options: { 'timeout' => 5, 'out' => '/ignored' }
          }
        end

        it { expect(node_config(catalogue, '/srv/t/typhapki.yaml')['defaults']).to include('out' => '/srv/t/out', 'state_dir' => '/srv/t/state', 'timeout' => 5) }
        it { is_expected.to contain_exec('typhapki-issue').with_environment(['TYPHAPKI_CONFIG=/srv/t/typhapki.yaml']) }
        it { is_expected.to contain_exec('typhapki-ferm').with_environment(['TYPHAPKI_CONFIG=/srv/t/typhapki.yaml']) }
        it { is_expected.to contain_file('/srv/t/facts.d/typhapki').with_content(%r{^TYPHAPKI_CONFIG=/srv/t/typhapki\.yaml$}) }
        it { is_expected.to contain_exec('typhapki-restart-typha').with_onlyif('test -e /srv/t/out/.restart-typha') }
      end

      context 'with every TLS policy value and a port the nodes accept' do
        let(:facts) { os_facts.merge(typhapki_spec_case: 'typha_policy') }

        it { is_expected.to compile.with_all_deps }
      end

      context 'with manage_certs, manage_ferm and manage_fact off' do
        let(:params) { { manage_certs: false, manage_ferm: false, manage_fact: false } }

        it { is_expected.to compile.with_all_deps }
        it { is_expected.not_to contain_class('typhapki::certs') }
        it { is_expected.not_to contain_class('typhapki::ferm') }
        it { is_expected.not_to contain_class('typhapki::fact') }
        it { expect(node_config(catalogue)['defaults']).not_to have_key('ca_dir') }
      end

      describe 'rejects at compile time' do
        {
          'an unknown role' => [{ role: 'master' }, %r{role.*expects a match for Typhapki::Role}],
          'a relative path' => [{ out: 'var/lib/typhapki' }, %r{out.*expects a Stdlib::Absolutepath}],
          'a cluster name with a slash' => [{ cluster: '../etc' }, %r{cluster.*expects}],
          'a cluster missing from kubernetes::clusters' => [{ cluster: 'nowhere' }, %r{cluster 'nowhere' is not in kubernetes::clusters \(groups: main, ml, twice\)}],
          'a cluster in two groups' => [{ cluster: 'other' }, %r{cluster 'other' is in more than one group of kubernetes::clusters: main, twice}],
          'ferm on a Felix-only worker' => [{ role: 'felix', manage_ferm: true }, %r{typhapki::ferm protects the port of Typha.*not with role felix}],
          'a bad option name' => [{ options: { 'Bad Name' => 1 } }, %r{options.*expects}],
        }.each do |what, (params, message)|
          context what do
            let(:params) { params }

            it { is_expected.to compile.and_raise_error(message) }
          end
        end

        {
          'no cluster data on the server' => ['no_clusters', %r{cluster is 'staging-eqiad' but kubernetes::clusters is not in hiera}],
          'ferm without a cluster' => ['no_cluster', %r{typhapki::ferm needs typhapki::cluster}],
          # The cluster's typha: mapping, judged by the types generated from the CLI's
          # option table (types/typha/): the message names the hiera key of the value.
          'a misspelt stage' => ['bad_tls_stage', %r{typhapki: kubernetes::clusters\.main\.staging-eqiad\.typha\.tls_stage: expected Typhapki::Typha::TlsStage.*got 'retrie'}],
          'a cipher suite Typha panics on' => ['bad_cipher_suites', %r{typhapki: kubernetes::clusters\.main\.staging-eqiad\.typha\.tls_cipher_suites: expected Typhapki::Typha::CipherSuites}],
          'the plain port on the TLS port' => ['bad_plain_port', %r{typhapki: kubernetes::clusters\.main\.staging-eqiad\.typha\.port: 5474 is the TLS Typha's server port, which tls_stage parallel opens}],
          'an unknown typha: key' => ['bad_typha_key', %r{typhapki: kubernetes::clusters_defaults\.typha\.tls_stag: unknown key in typha:}],
        }.each do |what, (spec_case, message)|
          context what do
            let(:facts) { os_facts.merge(typhapki_spec_case: spec_case) }
            let(:params) { { manage_ferm: true } } if spec_case == 'no_cluster'

            it { is_expected.to compile.and_raise_error(message) }
          end
        end
      end
    end
  end
end
