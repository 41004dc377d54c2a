package service

import (
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/envoyproxy/ratelimit/src/settings"

	"github.com/swarmgate/swarmgate/internal/config"
	"github.com/swarmgate/swarmgate/internal/contract"
)

// buildSettings returns the envoyproxy/ratelimit settings for cfg. It never
// reads or writes the process environment: every field starts from the
// library's own `default:"..."` struct tag and the fields the embedded path
// uses are then set from our config.
func buildSettings(cfg *config.Config, stopIncrementWhenOverLimit bool) (settings.Settings, error) {
	s, err := defaultSettings()
	if err != nil {
		return s, err
	}
	s.ConfigType = "GRPC_XDS_SOTW"
	s.ConfigGrpcXdsServerUrl = cfg.Envoy.XDSAddress
	s.ConfigGrpcXdsNodeId = contract.NodeRateLimit
	s.BackendType = "redis"
	s.CacheKeyPrefix = cfg.Redis.KeyPrefix + "rl:"
	s.StopCacheKeyIncrementWhenOverlimit = stopIncrementWhenOverLimit
	s.UseStatsd = false
	s.DisableStats = true
	s.LocalCacheSizeInBytes = 0
	s.RedisTimeout = cfg.Redis.ReadTimeout.D()
	return s, nil
}

var durationType = reflect.TypeOf(time.Duration(0))

// defaultSettings applies the `default` struct tags of settings.Settings,
// which is what settings.NewSettings() yields in an empty environment.
func defaultSettings() (settings.Settings, error) {
	var s settings.Settings
	v := reflect.ValueOf(&s).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		def, ok := t.Field(i).Tag.Lookup("default")
		if !ok || def == "" {
			continue
		}
		f := v.Field(i)
		if err := setFromString(f, def); err != nil {
			return s, fmt.Errorf("ratelimit settings default %s=%q: %w", t.Field(i).Name, def, err)
		}
	}
	return s, nil
}

func setFromString(f reflect.Value, s string) error {
	if f.Type() == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		f.SetInt(n)
	case reflect.Float32, reflect.Float64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		f.SetFloat(x)
	default:
		return fmt.Errorf("unsupported kind %s", f.Kind())
	}
	return nil
}

// envOverrides are the settings the library re-reads from the environment
// on every config update (service.SetConfig and the xDS provider call
// settings.NewSettings()). We cannot stop that, so we check them up front.
var envOverrides = []string{"SHADOW_MODE", "QUOTA_MODE", "RESPONSE_DYNAMIC_METADATA",
	"LIMIT_RESPONSE_HEADERS_ENABLED", "MERGE_DOMAIN_CONFIG"}

// checkEnvironment fails when the process environment would make the
// library's settings.NewSettings() panic (it does so inside a goroutine on
// each config update, which would crash the process), and lists the
// variables that silently change the service's answers.
func checkEnvironment(lookup func(string) (string, bool)) (set []string, err error) {
	// The same call the library makes later (env parsing and the TLS files
	// it names), here where a failure can be returned.
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("environment would crash envoyproxy/ratelimit on its next config update: %v", r)
			}
		}()
		_ = settings.NewSettings()
	}()
	if err != nil {
		return nil, err
	}
	for _, k := range envOverrides {
		if _, ok := lookup(k); ok {
			set = append(set, k)
		}
	}
	return set, nil
}
