package usage_test

import (
	"fmt"

	"github.com/swarmgate/swarmgate/internal/accounting/usage"
)

// The response-body side of ext_proc for a streaming request where the
// gateway injected include_usage: account from every chunk, forward the
// filtered bytes.
func Example() {
	chunks := []string{
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\ndata: {\"choi",
		"ces\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":2,\"total_tokens\":14}}\n\ndata: [DONE]\n\n",
	}
	var p usage.StreamParser // pool these (Reset) across requests
	var f usage.StreamFilter
	clientAskedForUsage := false
	var toClient []byte
	for _, c := range chunks {
		p.Write([]byte(c))
		if clientAskedForUsage {
			toClient = append(toClient, c...)
		} else {
			toClient = append(toClient, f.Write([]byte(c))...)
		}
	}
	p.Flush()
	toClient = append(toClient, f.Flush()...)

	u, ok := p.Usage()
	fmt.Println(u.PromptTokens, u.CompletionTokens, u.TotalTokens, ok, p.Done(), p.DeliveredContentBytes())
	fmt.Print(string(toClient))
	// Output:
	// 12 2 14 true true 5
	// data: {"choices":[{"index":0,"delta":{"content":"Hel"}}],"usage":null}
	//
	// data: {"choices":[{"index":0,"delta":{"content":"lo"}}],"usage":null}
	//
	// data: [DONE]
}
