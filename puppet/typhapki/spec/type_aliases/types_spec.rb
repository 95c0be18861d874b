# frozen_string_literal: true

require 'spec_helper'

# Every type alias of types/, with values it accepts and rejects.
{
  'Typhapki::Mode' => [['local', 'shipped', 'cfssl'], ['vault', 'Local', '', nil, 1]],
  'Typhapki::Role' => [['typha', 'felix', 'both'], ['node', 'all', '', nil]],
  'Typhapki::Component' => [['typha', 'felix'], ['both', 'calico-node', nil]],
  'Typhapki::KeyType' => [['ecdsa-p256', 'ecdsa-p384', 'rsa-2048', 'rsa-3072', 'rsa-4096'], ['dsa-1024', 'ed25519', 'rsa-1024', 'ECDSA-P256']],
  'Typhapki::FermMode' => [['strict', 'relaxed'], ['loose', 'Strict', nil]],
  'Typhapki::FermStyle' => [['plain', 'function'], ['functions', 'block']],
  'Typhapki::DnsGate' => [['enforce', 'warn'], ['ignore', 'off', true]],
  'Typhapki::FirewallProvider' => [['ferm', 'nftables'], ['nft', 'iptables', 'Nftables', 'firewalld', '', nil]],
  'Typhapki::Nameserver' => [
    ['10.3.0.1', '10.3.0.1:5353', '2001:db8::1', '[2001:db8::1]:5353', '::1'],
    ['ns1.example.org', '10.3.0.1:', '10.3.0.0/24', '[2001:db8::1]', '10.3.0.1:port', ''],
  ],
  'Typhapki::CfsslName' => [['cluster2025', 'typha', 'staging_eqiad', 'A1_b'], ['cluster-2025', 'typha.eqiad', 'a b', "a\n", '', 1]],
  'Typhapki::RenewBefore' => [['30d', '12h', '90m', '2w', '3600', '3600s'], ['0d', '30 d', '-1d', '30y', 'd', '']],
  'Typhapki::KeyMode' => [['0600', '0640', '0400', '0440', '600', '640'], ['0644', '0660', '0700', '0000', '0200', 'u=rw', '1640', '00640x', '', 640]],
  'Typhapki::CfsslUrl' => [
    ['https://pki.example.org', 'https://pki.example.org:8888', 'https://pki.example.org:8888/prefix/', 'https://[2001:db8::1]:443', 'http://127.0.0.1:8888', 'http://localhost:8888', 'http://[::1]:8888'],
    ['http://pki.example.org:8888', 'ftp://pki', 'https://', 'https://user:pw@pki.example.org', 'https://pki.example.org/?q=1', 'https://pki.example.org/#f', 'https://pki.example.org:99999', 'https://pki example.org', ''],
  ],
  'Typhapki::Lifetime' => [['28d', '24h', '90m', '2w', '86400', '3600s'], ['0h', '24 h', '-1d', '1y', 'h', '']],
}.each do |type, (good, bad)|
  describe type do
    good.each do |value|
      it { is_expected.to allow_value(value) }
    end
    bad.each do |value|
      it { is_expected.not_to allow_value(value) }
    end
  end
end
