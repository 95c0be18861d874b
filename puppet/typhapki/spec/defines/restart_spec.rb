# frozen_string_literal: true

require 'spec_helper'

describe 'typhapki::restart' do
  # typhapki declares no restarts of its own in this case: the define stands alone.
  let(:facts) { typhapki_os_facts.values.first.merge(typhapki_spec_case: 'no_restarts') }
  let(:title) { 'typha' }
  let(:params) { { command: 'systemctl restart calico-typha' } }

  it { is_expected.to compile.with_all_deps }

  it 'runs the restart, then clears the marker, only while the marker exists' do
    is_expected.to contain_exec('typhapki-restart-typha').with(
      command: 'systemctl restart calico-typha && /usr/bin/typhapki restarted --component typha',
      onlyif: 'test -e /var/lib/typhapki/.restart-typha',
      provider: 'shell',
      environment: ['TYPHAPKI_CONFIG=/etc/typhapki/typhapki.yaml'],
    )
  end
  it { is_expected.not_to contain_exec('typhapki-restart-typha').with_refreshonly(true) }

  context 'with a title that is not a component' do
    let(:title) { 'calico' }

    it { is_expected.to compile.and_raise_error(%r{component.*expects a match for Typhapki::Component}) }
  end

  context 'with an explicit component' do
    let(:title) { 'felix on this node' }
    let(:params) { { command: 'true', component: 'felix' } }

    it { is_expected.to contain_exec('typhapki-restart-felix').with_onlyif('test -e /var/lib/typhapki/.restart-felix') }
  end
end
