// Package budget enforces money budgets per tenant and calendar month (UTC)
// and raises threshold alerts, also for sub-key budgets (ObserveKey: their
// spend is counted and capped by accounting/reserve).
//
// Spend is the ledger's month total (accounting/ledger), so every replica
// sees the same figure. Alerts fire once per tenant, month and threshold
// across all replicas: the first replica to SET NX the alert's key in Redis
// logs it, counts it and posts the webhook. The hard cap is enforced at
// admission by accounting/reserve (reserve-then-settle, no overshoot beyond
// in-flight estimates) or, when token limits are left to the rate-limit
// service, by Check here (in-flight requests may overshoot the cap; they
// finish and are counted).
package budget
