# frozen_string_literal: true

require 'spec_helper'

# The compile settings every other spec runs with are Puppet 8's: this spec fails when
# spec_helper.rb stops setting them.
describe 'typhapki' do
  typhapki_os_facts.each do |os, os_facts|
    context "on #{os} with Puppet 8's strictness" do
      let(:facts) { os_facts }

      it 'compiles with strict=error' do
        expect(Puppet[:strict]).to eq(:error)
        is_expected.to compile.with_all_deps
      end

      it 'has no legacy fact' do
        expect(os_facts.keys.map(&:to_s)).not_to include('operatingsystem', 'osfamily', 'ipaddress')
        expect(os_facts).to include(:os)
      end

      context 'with a manifest that reads a legacy fact' do
        let(:pre_condition) { 'notice($::osfamily)' }

        it { is_expected.not_to compile }
      end
    end
  end
end
