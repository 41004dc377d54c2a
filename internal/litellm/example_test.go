package litellm_test

import (
	"fmt"

	"github.com/swarmgate/swarmgate/internal/litellm"
)

func ExampleConvert() {
	res, err := litellm.Convert([]byte(`
model_list:
  - model_name: gpt-4o-mini
    litellm_params: {model: openai/gpt-4o-mini, api_key: os.environ/OPENAI_KEY_1, rpm: 500}
  - model_name: gpt-4o-mini
    litellm_params: {model: openai/gpt-4o-mini, api_key: os.environ/OPENAI_KEY_2, rpm: 500}
router_settings: {num_retries: 2, redis_host: redis}
`))
	if err != nil {
		panic(err)
	}
	fmt.Print(string(res.YAML))
	for _, n := range res.Notes {
		fmt.Println("#", n)
	}
	// Output:
	// backends:
	//   - base_url: https://api.openai.com/v1
	//     keys:
	//       - id: openai-1
	//         rpm: 500
	//         secret: env:OPENAI_KEY_1
	//       - id: openai-2
	//         rpm: 500
	//         secret: env:OPENAI_KEY_2
	//     name: openai
	// models:
	//   - name: gpt-4o-mini
	//     targets:
	//       - backend: openai
	// redis:
	//   addrs:
	//     - redis:6379
	// retry:
	//   num_retries: 2
	// # LiteLLM virtual keys, teams and budgets live in its database: add tenants (keys hashed with `swarmgate hash-key`, limits, budget) before clients can call
}
