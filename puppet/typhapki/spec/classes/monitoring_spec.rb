# frozen_string_literal: true

require 'spec_helper'

# typhapki::monitoring is private: compiled through typhapki, parameters from hiera cases.
describe 'typhapki' do
  typhapki_os_facts.each do |os, os_facts|
    context "on #{os}" do
      let(:facts) { os_facts.merge(typhapki_spec_case: spec_case) }
      let(:spec_case) { nil }

      context 'with the defaults: monitoring on' do
        let(:dropin) { '/etc/systemd/system/typhapki-metrics.service.d/typhapki.conf' }

        it { is_expected.to compile.with_all_deps }
        it { is_expected.to contain_class('typhapki::monitoring').that_requires('Class[typhapki::config]') }

        it 'tells `typhapki metrics` where node_exporter reads, in the node configuration' do
          expect(node_config(catalogue)['commands']['metrics']).to eq('textfile_dir' => '/var/lib/prometheus/node-exporter')
          expect(node_config(catalogue)['defaults']['out']).to eq('/var/lib/typhapki')
        end

        it 'points the service at that file and opens the directory for writing' do
          is_expected.to contain_file(dropin).with(mode: '0644', owner: 'root').with_content(
            %r{^\[Service\]\nEnvironment="TYPHAPKI_CONFIG=/etc/typhapki/typhapki\.yaml"\nReadWritePaths=-/var/lib/prometheus/node-exporter\n\z},
          )
          is_expected.to contain_exec('typhapki-metrics-daemon-reload').with(refreshonly: true).that_subscribes_to("File[#{dropin}]")
        end

        it 'enables and starts the timer after systemd has read the drop-in' do
          is_expected.to contain_service('typhapki-metrics.timer').with(ensure: 'running', enable: true)
            .that_requires('Exec[typhapki-metrics-daemon-reload]')
        end

        it 'writes the marker the missing-metrics alert looks for' do
          is_expected.to contain_file('/var/lib/prometheus/node-exporter/typhapki-expected.prom')
            .with(mode: '0644', source: 'puppet:///modules/typhapki/typhapki-expected.prom')
          is_expected.to contain_file('/var/lib/prometheus/node-exporter').with(ensure: 'directory', owner: nil, mode: nil)
        end
      end

      context 'another textfile directory, the timer and the directory managed elsewhere' do
        let(:spec_case) { 'monitoring_elsewhere' }

        it { expect(node_config(catalogue)['commands']['metrics']).to eq('textfile_dir' => '/var/lib/node_exporter/textfile') }
        it { is_expected.to contain_file('/etc/systemd/system/typhapki-metrics.service.d/typhapki.conf').with_content(%r{^ReadWritePaths=-/var/lib/node_exporter/textfile$}) }
        it { is_expected.not_to contain_service('typhapki-metrics.timer') }
        it { is_expected.not_to contain_exec('typhapki-metrics-daemon-reload') }
        it { is_expected.not_to contain_file('/var/lib/node_exporter/textfile') }
      end

      context 'with manage_monitoring false' do
        let(:params) { { manage_monitoring: false } }

        it { is_expected.not_to contain_class('typhapki::monitoring') }
        it { is_expected.not_to contain_service('typhapki-metrics.timer') }
        it { expect(node_config(catalogue).fetch('commands', {})).not_to have_key('metrics') }
      end

      context 'declared directly' do
        let(:pre_condition) { 'class { "typhapki::monitoring": }' }

        it { is_expected.to compile.and_raise_error(%r{declare class typhapki \(typhapki::manage_monitoring\)}) }
      end
    end
  end
end
