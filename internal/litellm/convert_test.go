package litellm

import (
	"strings"
	"testing"

	"github.com/swarmgate/swarmgate/internal/config"
)

const example = `
model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_key: os.environ/OPENAI_KEY_1, rpm: 5000}
    model_info: {input_cost_per_token: 0.0000025, output_cost_per_token: 0.00001, max_input_tokens: 128000}
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_key: os.environ/OPENAI_KEY_2, rpm: 5000}
  - model_name: gpt-4o
    litellm_params:
      model: azure/gpt4o-prod
      api_base: https://swarm.openai.azure.com/
      api_key: os.environ/AZURE_KEY
      order: 2
  - model_name: local
    litellm_params: {model: hosted_vllm/llama-3, api_base: "http://vllm.internal:8000/v1", api_key: sk-inline-secret}
  - model_name: claude
    litellm_params: {model: anthropic/claude-sonnet-4, api_key: os.environ/ANTHROPIC_KEY}
router_settings:
  num_retries: 3
  allowed_fails: 2
  cooldown_time: 30
  timeout: 90
  redis_host: redis
  redis_port: 6380
  redis_password: os.environ/REDIS_PW
  fallbacks: [{gpt-4o: [local]}]
`

func TestConvert(t *testing.T) {
	res, err := Convert([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(res.YAML, "converted", config.Options{SkipSecrets: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, res.YAML)
	}
	if strings.Contains(string(res.YAML), "sk-inline-secret") {
		t.Fatal("an inline key was copied into the output")
	}

	openai, ok := cfg.Backend("openai")
	if !ok || openai.BaseURL != "https://api.openai.com/v1" || len(openai.Keys) != 2 || openai.Keys[0].RPM != 5000 ||
		openai.Keys[1].Secret.Ref() != "env:OPENAI_KEY_2" {
		t.Errorf("openai backend = %+v", openai)
	}
	azure, ok := cfg.Backend("swarm")
	if !ok || azure.BaseURL != "https://swarm.openai.azure.com/openai/v1" || azure.Auth != config.AuthAPIKey {
		t.Errorf("azure backend = %+v (ok %v)", azure, ok)
	}
	vllm, ok := cfg.Backend("vllm")
	if !ok || vllm.Keys[0].Secret.Ref() != "env:LITELLM_KEY_1" {
		t.Errorf("vllm backend = %+v (ok %v)", vllm, ok)
	}

	var gpt *config.Model
	for i := range cfg.Models {
		if cfg.Models[i].Name == "gpt-4o" {
			gpt = &cfg.Models[i]
		}
		if cfg.Models[i].Name == "claude" {
			t.Error("a non-OpenAI provider without api_base was converted")
		}
	}
	if gpt == nil || len(gpt.Targets) != 2 {
		t.Fatalf("gpt-4o = %+v", gpt)
	}
	first, second := gpt.Targets[0], gpt.Targets[1]
	if first.Backend != "openai" || first.Priority != 0 || first.Price.InputPerMTok != 2.5 || first.Price.OutputPerMTok != 10 || first.ContextWindow != 128000 {
		t.Errorf("first target = %+v", first)
	}
	if second.Backend != "swarm" || second.Model != "gpt4o-prod" || second.Priority != 1 {
		t.Errorf("second target = %+v", second)
	}

	if cfg.Retry.NumRetries != 3 || cfg.Breaker.Consecutive429 != 2 || cfg.Breaker.Cooldown.Duration.Seconds() != 30 ||
		cfg.Request.Timeout.Duration.Seconds() != 90 {
		t.Errorf("retry %+v breaker %+v request timeout %v", cfg.Retry, cfg.Breaker, cfg.Request.Timeout)
	}
	if cfg.Redis.Addrs[0] != "redis:6380" || cfg.Redis.Password.Ref() != "env:REDIS_PW" {
		t.Errorf("redis = %+v", cfg.Redis)
	}

	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{"anthropic", "inline api_key", "LITELLM_KEY_1", "fallbacks", "tenants"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

func TestConvertErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "model_list: []", "empty"},
		{"no model", "model_list: [{model_name: a, litellm_params: {}}]", "litellm_params.model"},
		{"azure without base", "model_list: [{model_name: a, litellm_params: {model: azure/x}}]", "api_base"},
		{"not yaml", "model_list: [", "litellm config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Convert([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
