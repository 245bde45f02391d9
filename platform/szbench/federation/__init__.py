"""Federated evaluation: a public hub and clinical centres (docs/federation.md).

A centre runs the hub's public algorithm versions (those whose owners allow external
evaluation) on its private EEG with its own workers, and publishes what its own disclosure
rule releases as a signed, bounded result bundle; the hub verifies each bundle and shows it
beside its own results. The same codebase plays both roles:

- :mod:`.signing`: Ed25519 keys, fingerprints, signatures (the ``cryptography`` library);
- :mod:`.bundles`: the bundle's byte format (RFC 8785 canonical JSON) and its bounds;
- :mod:`.released`: the one adapter to the disclosure rules (what a bundle may carry);
- :mod:`.hub_client`: the centre's HTTP calls to the hub;
- :mod:`.service`: the hub's side (centres, keys, verification, external results);
- :mod:`.centre`: the centre's side (subscription, versions, datasets, bundles, the tick).
"""
