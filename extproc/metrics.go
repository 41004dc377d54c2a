package extproc

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests      *prometheus.CounterVec // by tenant, model
	refusals      *prometheus.CounterVec // by code (fixed set)
	tokens        *prometheus.CounterVec // by tenant, model, kind
	disconnects   prometheus.Counter
	picks         *prometheus.CounterVec // by backend, key
	pickFailures  *prometheus.CounterVec // by backend
	unadmitted    prometheus.Counter
	lastResort    *prometheus.CounterVec // by backend
	accountingErr *prometheus.CounterVec // by step
	// translated counts translated attempts by pair and half (request,
	// response); untranslatable requests sent to native backends only or
	// refused; translateErr backend answers that could not be read.
	translated     *prometheus.CounterVec // by from, to, half
	untranslatable prometheus.Counter
	translateErr   *prometheus.CounterVec // by from, to
	// droppedTools counts hosted tools dropped from translated attempts
	// (backends[].hosted_tools), by backend and tool kind (a fixed set:
	// translate.HostedToolLabel).
	droppedTools *prometheus.CounterVec

	// Children resolved once per label set (config names only, so
	// bounded): the data path would otherwise hash label values on every
	// request and attempt.
	admitted sync.Map // labelPair{tenant, model} -> *admittedSeries
	picked   sync.Map // labelPair{backend, key} -> prometheus.Counter
}

type labelPair struct{ a, b string }

type admittedSeries struct {
	requests, prompt, completion prometheus.Counter
}

func (m *metrics) admittedFor(tenant, model string) *admittedSeries {
	k := labelPair{tenant, model}
	if v, ok := m.admitted.Load(k); ok {
		return v.(*admittedSeries)
	}
	v, _ := m.admitted.LoadOrStore(k, &admittedSeries{
		requests:   m.requests.WithLabelValues(tenant, model),
		prompt:     m.tokens.WithLabelValues(tenant, model, "prompt"),
		completion: m.tokens.WithLabelValues(tenant, model, "completion"),
	})
	return v.(*admittedSeries)
}

func (m *metrics) pickedFor(backend, key string) prometheus.Counter {
	k := labelPair{backend, key}
	if v, ok := m.picked.Load(k); ok {
		return v.(prometheus.Counter)
	}
	v, _ := m.picked.LoadOrStore(k, m.picks.WithLabelValues(backend, key))
	return v.(prometheus.Counter)
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_requests_total",
			Help: "Requests admitted by the router-level filter."}, []string{"tenant", "model"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_refusals_total",
			Help: "Requests answered locally with an error, by error code."}, []string{"code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_tokens_total",
			Help: "Tokens accounted, by kind (prompt, completion)."}, []string{"tenant", "model", "kind"}),
		disconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarmgate_extproc_disconnects_total",
			Help: "Responses cut before their end (client gone or upstream reset)."}),
		picks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_key_picks_total",
			Help: "Upstream keys chosen per attempt."}, []string{"backend", "key"}),
		pickFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_key_pick_failures_total",
			Help: "Attempts answered locally (429/503, Retry-After) because no key of their backend was usable."}, []string{"backend"}),
		lastResort: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_last_resort_attempts_total",
			Help: "Attempts sent on an open key because their backend had no usable one while another relay of the pool had (so Envoy retries there)."}, []string{"backend"}),
		unadmitted: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarmgate_extproc_unadmitted_attempts_total",
			Help: "Upstream attempts refused a key because they carried no valid signed admission (router-level filter failed open, or not Envoy)."}),
		accountingErr: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_accounting_errors_total",
			Help: "Failed accounting steps (reserve, settle, budget, ledger)."}, []string{"step"}),
		translated: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_translations_total",
			Help: "Request bodies (per attempt) and answers translated between API families."}, []string{"from", "to", "half"}),
		untranslatable: prometheus.NewCounter(prometheus.CounterOpts{Name: "swarmgate_extproc_untranslatable_requests_total",
			Help: "Requests the translator could not express, sent to natively speaking backends only or refused with 400."}),
		translateErr: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_translation_errors_total",
			Help: "Backend answers that could not be translated (not readable in the backend's family)."}, []string{"from", "to"}),
		droppedTools: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarmgate_extproc_dropped_tools_total",
			Help: "Hosted tools (web search, file search, code execution...) dropped from attempts translated for a backend whose API family cannot run them (backends[].hosted_tools)."}, []string{"backend", "tool"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.refusals, m.tokens, m.disconnects, m.picks, m.pickFailures, m.unadmitted, m.lastResort, m.accountingErr,
		m.translated, m.untranslatable, m.translateErr, m.droppedTools} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return m, nil
}
