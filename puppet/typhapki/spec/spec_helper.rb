# frozen_string_literal: true

# rspec-puppet for the typhapki module, with the Debian packages only (no bundler, no
# network): ruby-rspec-puppet, ruby-puppetlabs-spec-helper, ruby-rspec-puppet-facts and
# stdlib from puppet-module-puppetlabs-stdlib. Run from the repository by
# tests/puppet/test_module.py; or: cd puppet/typhapki && rspec spec
require 'fileutils'

# The fixture modules, as puppetlabs_spec_helper's .fixtures.yml symlinks would make
# them (spec/fixtures/modules is not committed).
module_root = File.expand_path('..', __dir__)
fixture_modules = File.join(__dir__, 'fixtures', 'modules')
FileUtils.mkdir_p(fixture_modules)
{
  'typhapki' => module_root,
  'stdlib' => ENV.fetch('TYPHAPKI_STDLIB', '/usr/share/puppet/modules/stdlib'),
}.each do |name, target|
  link = File.join(fixture_modules, name)
  File.symlink(target, link) unless File.symlink?(link) && File.readlink(link) == target
end

RSpec.configure do |c|
  c.mock_with :rspec
end

require 'puppetlabs_spec_helper/module_spec_helper'
require 'rspec-puppet-facts'

include RspecPuppetFacts

RSpec.configure do |c|
  # The Puppet server's hiera: kubernetes::clusters, and one file per test case
  # (selected by the fact typhapki_spec_case) for the private classes' parameters.
  c.hiera_config = File.join(__dir__, 'fixtures', 'hiera', 'hiera.yaml')
  c.strict_variables = true
  # Puppet 8's defaults on every Puppet the module supports (metadata.json: 7 and 8):
  # a language warning is an error.
  c.before(:each) { Puppet[:strict] = :error }
end

# Puppet 8 (and Facter 4 with include_legacy_facts off) has no legacy facts: the facts a
# catalog compiles with leave out every fact of Facter's own 'legacy' group.
require 'facter/config'
LEGACY_FACTS = Facter::Config::FACT_GROUPS.fetch('legacy').map do |pattern|
  Regexp.new("\\A#{pattern.split('*', -1).map { |part| Regexp.escape(part) }.join('.*')}\\z")
end

def without_legacy_facts(facts)
  facts.reject { |name, _| LEGACY_FACTS.any? { |legacy| legacy.match?(name.to_s) } }
end

# facterdb 1.12 (bookworm) has no Debian 12 facts yet: Debian 11's stand in, with the
# release corrected. The module reads no OS fact; the facts make a realistic node.
# One release's facts: the module reads no OS fact, and a second set would double two
# minutes of rspec.
def typhapki_os_facts
  found = on_supported_os.first(1).to_h
  found = found.empty? ? debian11_as_12 : found
  found.transform_values { |facts| without_legacy_facts(facts) }
end

def debian11_as_12
  on_supported_os(
    supported_os: [{ 'operatingsystem' => 'Debian', 'operatingsystemrelease' => ['11'] }],
  ).to_h do |_os, facts|
    ['debian-12-x86_64', facts.merge(os: facts[:os].merge('release' => { 'major' => '12', 'full' => '12.0' }))]
  end
end

# The node configuration file the catalog writes, parsed.
def node_config(catalogue, path = '/etc/typhapki/typhapki.yaml')
  YAML.safe_load(catalogue.resource('File', path)[:content])
end
