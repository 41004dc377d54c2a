package chatreq_test

import (
	"errors"
	"fmt"

	"github.com/swarmgate/swarmgate/internal/chatreq"
)

// The router-level ext_proc flow on a buffered request body.
func Example() {
	body := []byte(`{"model":"fast","stream":true,"messages":[{"role":"user","content":"Write a haiku about queues."}]}`)
	req, err := chatreq.Scan(body)
	var se *chatreq.SyntaxError
	switch {
	case errors.As(err, &se):
		fmt.Println("400:", se) // position in the message
		return
	case err != nil:
		fmt.Println("400:", err)
		return
	}
	fmt.Println(req.Model, req.Stream, req.IncludeUsage, req.EstimatePromptTokens(0))

	// Ask for the usage chunk (remember req.IncludeUsage: strip the chunk
	// from the response if the client did not ask for it) and name the
	// upstream model.
	if req.Stream && !req.IncludeUsage {
		body, _ = chatreq.SetIncludeUsage(body)
	}
	body, _ = chatreq.SetModel(body, "gpt-4o-mini-2024-07-18")
	fmt.Println(string(body))
	// Output:
	// fast true false 13
	// {"model":"gpt-4o-mini-2024-07-18","stream":true,"messages":[{"role":"user","content":"Write a haiku about queues."}],"stream_options":{"include_usage":true}}
}
