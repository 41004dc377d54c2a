package e2e

import (
	"errors"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/swarmgate/swarmgate/internal/contract"
)

// TestResponsesPreviousResponseAffinity: a Responses request naming a
// previous_response_id reaches the backend and key that created it, JSON
// and stream, through two upstream ext_proc replicas. The mock answers 404
// previous_response_not_found when another key continues a response, and
// the alias's backend has two keys picked in turn: without the affinity
// about half the follow-ups would fail.
func TestResponsesPreviousResponseAffinity(t *testing.T) {
	g := startFamilies(t)
	ctx := testCtx(t)
	c := g.client(keyTeam)

	var firsts []string
	for range 2 {
		r, err := c.Responses.New(ctx, responseParams("gpt-resp"))
		if err != nil {
			t.Fatal(err)
		}
		firsts = append(firsts, r.ID)
		s := c.Responses.NewStreaming(ctx, responseParams("gpt-resp"))
		id := ""
		for s.Next() {
			if ev := s.Current(); ev.Type == "response.completed" {
				id = ev.Response.ID
			}
		}
		if err := s.Err(); err != nil || id == "" {
			t.Fatalf("stream: %v, id %q", err, id)
		}
		firsts = append(firsts, id)
	}
	for i, prev := range firsts {
		for j := range 3 {
			p := responseParams("gpt-resp")
			p.PreviousResponseID = openai.String(prev)
			rid := "follow-" + prev + "-" + string(rune('a'+j))
			if j == 1 {
				s := c.Responses.NewStreaming(ctx, p, option.WithHeader("x-request-id", rid))
				got := ""
				for s.Next() {
					if ev := s.Current(); ev.Type == "response.completed" {
						got = ev.Response.PreviousResponseID
					}
				}
				if err := s.Err(); err != nil || got != prev {
					t.Fatalf("follow-up %d/%d (stream) of %s: %v, previous %q", i, j, prev, err, got)
				}
			} else {
				r, err := c.Responses.New(ctx, p, option.WithHeader("x-request-id", rid))
				if err != nil || r.PreviousResponseID != prev {
					t.Fatalf("follow-up %d/%d of %s: %v", i, j, prev, err)
				}
			}
			rec, ok := waitRecord(t, g.sim, rid)
			if !ok || rec.Cluster != (contract.Pool{Alias: "gpt-resp", Backend: "oai"}).Cluster() || len(rec.Attempts) != 1 {
				t.Fatalf("follow-up %s: sim record %+v", rid, rec)
			}
		}
	}
	if n := len(g.relay.Requests()); n != 0 {
		t.Errorf("the relay got %d requests", n)
	}
	keys := map[string]int{}
	for _, rec := range g.oai.Requests() {
		if rec.Status != http.StatusOK {
			t.Errorf("the backend answered %d (%s) to a %s request", rec.Status, rec.Outcome, rec.KeyID)
		}
		keys[rec.KeyID]++
	}
	if keys["oai-1"] == 0 || keys["oai-2"] == 0 {
		t.Fatalf("both keys must have created responses for the test to mean anything: %v", keys)
	}

	p := responseParams("gpt-resp")
	p.PreviousResponseID = openai.String("resp_never_seen")
	_, err := c.Responses.New(ctx, p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "previous_response_id" {
		t.Fatalf("unknown previous_response_id: want 400 naming previous_response_id, got %v", err)
	}
}
