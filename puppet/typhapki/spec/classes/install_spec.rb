# frozen_string_literal: true

require 'spec_helper'

describe 'typhapki' do
  let(:facts) { typhapki_os_facts.values.first }

  context 'installing the package (typhapki::install)' do
    let(:params) { { package_name: 'python3-typhapki', package_ensure: '0.2.0-1' } }

    it { is_expected.to contain_package('python3-typhapki').with_ensure('0.2.0-1').that_comes_before('File[/etc/typhapki/typhapki.yaml]') }
  end

  context 'declared directly' do
    let(:pre_condition) { 'include typhapki::install' }

    it { is_expected.to compile.and_raise_error(%r{typhapki::install is private}) }
  end
end
