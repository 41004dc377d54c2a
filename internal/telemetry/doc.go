// Package telemetry holds what every swarmgate component shares for
// observability and that belongs to no single one of them: the data-path
// Prometheus families (requests, phase latency, time to first token, tokens,
// cost), the Redis command-error hook, structured access logs with a body
// redactor for debug logging, and the OpenTelemetry tracer provider with
// GenAI semantic-convention attribute helpers.
//
// Label values only ever come from the validated config (tenant, model,
// backend, key id) or from small fixed sets in code; a value not in the
// config is reported as "other", so no request input can grow a series.
package telemetry
