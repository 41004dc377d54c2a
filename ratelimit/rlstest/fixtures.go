package rlstest

// GatewayYAML is a small gateway config for rate-limit tests: tenant "t1"
// at 600 RPM and 3 RPD-free, tenant "small" at 3 RPM, token limits enforced
// by the rate-limit filter (tenant t1: 10000 TPM), and upstream key "k1" at
// 60 RPM / 5000 TPM.
const GatewayYAML = `
accounting:
  token_limits: ratelimit
failure_modes:
  ratelimit: open
backends:
  - name: b1
    base_url: http://127.0.0.1:9/v1
    keys:
      - {id: k1, secret: env:K1, rpm: 60, tpm: 5000}
      - {id: k2, secret: env:K2}
models:
  - name: m1
    targets: [{backend: b1}]
tenants:
  - name: t1
    keys: [{id: t1-1, hash: "sha256:1111111111111111111111111111111111111111111111111111111111111111"}]
    models: ["*"]
    limits: {rpm: 600, tpm: 10000}
    model_limits:
      m1: {rpm: 400}
  - name: small
    keys: [{id: s-1, hash: "sha256:2222222222222222222222222222222222222222222222222222222222222222"}]
    models: ["*"]
    limits: {rpm: 3, rpd: 5}
`
