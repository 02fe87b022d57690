package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// EnvPrefix starts the name of every environment variable Load reads.
const EnvPrefix = "SHARDNODE"

// ConfigFileEnv names the config file when the --config flag is not set.
const ConfigFileEnv = EnvPrefix + "_CONFIG"

// ConfigFlag is the name of the flag that names the config file.
const ConfigFlag = "config"

// EnvName returns the environment variable for a key: SHARDNODE_ and the key
// in upper case with dots and dashes turned into underscores, so
// "node.data-dir" becomes SHARDNODE_NODE_DATA_DIR.
func EnvName(key string) string {
	r := strings.NewReplacer(".", "_", "-", "_")
	return EnvPrefix + "_" + strings.ToUpper(r.Replace(key))
}

// BindFlags registers on fs the flags for the common keys: --config FILE,
// --tag, --data-dir, --http-addr, --raft-addr, --bootstrap, --join,
// --nats-url, --nats-listen, --nats-cluster-listen, --nats-routes,
// --cluster-name, --log-level and --log-format. The flags show the built-in
// defaults, but only flags explicitly set on the command line override the
// file and the environment.
func BindFlags(fs *pflag.FlagSet) {
	fs.String(ConfigFlag, "", "YAML config `file` (env "+ConfigFileEnv+")")
	d := Default()
	for _, f := range d.fields() {
		if f.flag == "" {
			continue
		}
		usage := fmt.Sprintf("%s (%s, env %s)", f.usage, f.key, EnvName(f.key))
		switch p := f.ptr.(type) {
		case *string:
			fs.String(f.flag, *p, usage)
		case *bool:
			fs.Bool(f.flag, *p, usage)
		case *int64:
			fs.Int64(f.flag, *p, usage)
		case *[]string:
			fs.StringSlice(f.flag, *p, usage)
		default:
			panic(fmt.Sprintf("config: field %s has unsupported type %T", f.key, f.ptr))
		}
	}
}

// Load builds the Config from the defaults, the config file named by the
// --config flag on fs (or, when that is not set, by SHARDNODE_CONFIG), the
// SHARDNODE_* environment variables and the flags on fs that were explicitly
// set, then validates it. fs may be nil. Errors name the offending key.
func Load(fs *pflag.FlagSet) (*Config, error) {
	return LoadFrom("", os.LookupEnv, fs)
}

// LoadFrom is Load with its inputs made explicit, for tests and embedding.
// file, when not empty, names the config file and takes precedence over the
// --config flag and SHARDNODE_CONFIG. lookupEnv reads the environment (nil
// means os.LookupEnv); as with viper's default, a variable set to the empty
// string counts as unset. fs may be nil.
//
// A file ending in .json or .toml is read in that format; any other name is
// read as YAML. Unknown keys in the file are errors.
func LoadFrom(file string, lookupEnv func(string) (string, bool), fs *pflag.FlagSet) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	getEnv := func(name string) (string, bool) {
		val, ok := lookupEnv(name)
		return val, ok && val != ""
	}

	cfg := Default()
	fields := cfg.fields()
	v := viper.New()

	// Defaults: one for every key (see DESIGN §8), straight from Default.
	for _, f := range fields {
		val := reflectValue(f.ptr)
		if s, ok := val.([]string); ok && s == nil {
			val = []string{}
		}
		v.SetDefault(f.key, val)
	}

	// The file.
	if file == "" && fs != nil {
		if fl := fs.Lookup(ConfigFlag); fl != nil {
			file = fl.Value.String()
		}
	}
	if file == "" {
		file, _ = getEnv(ConfigFileEnv)
	}
	var errs []error
	var fileKeys map[string]bool
	if file != "" {
		settings, present, keyErrs, err := readFile(file)
		if err != nil {
			return nil, err
		}
		fileKeys = present
		errs = append(errs, keyErrs...)
		if err := v.MergeConfigMap(settings); err != nil {
			return nil, fmt.Errorf("config: %s: %w", file, err)
		}
	}

	// The environment, merged over the file.
	envSet := map[string]bool{}
	envMap := map[string]any{}
	for _, f := range fields {
		val, ok := getEnv(EnvName(f.key))
		if !ok {
			continue
		}
		envSet[f.key] = true
		section, key, _ := strings.Cut(f.key, ".")
		m, _ := envMap[section].(map[string]any)
		if m == nil {
			m = map[string]any{}
			envMap[section] = m
		}
		m[key] = val
	}
	if len(envMap) > 0 {
		if err := v.MergeConfigMap(envMap); err != nil {
			return nil, fmt.Errorf("config: environment: %w", err)
		}
	}

	// The flags; viper only uses those that were explicitly set.
	flagSet := map[string]string{}
	if fs != nil {
		for _, f := range fields {
			if f.flag == "" {
				continue
			}
			fl := fs.Lookup(f.flag)
			if fl == nil {
				continue
			}
			if err := v.BindPFlag(f.key, fl); err != nil {
				return nil, fmt.Errorf("config: flag --%s: %w", f.flag, err)
			}
			if fl.Changed {
				flagSet[f.key] = f.flag
			}
		}
	}

	// sourceOf names where key's value came from; "" for a default.
	sourceOf := func(key string) string {
		switch {
		case flagSet[key] != "":
			return "flag --" + flagSet[key]
		case envSet[key]:
			return "env " + EnvName(key)
		case fileKeys[key]:
			return "file " + file
		}
		return ""
	}

	// Decode every key into the struct, checking its type.
	for _, f := range fields {
		raw := v.Get(f.key)
		// Sizes and rates of bytes take KiB, MiB or GiB suffixes.
		size := strings.HasSuffix(f.key, "-bytes") || strings.HasSuffix(f.key, "-bytes-per-sec")
		if err := assign(f.ptr, raw, size); err != nil {
			errs = append(errs, &Error{Key: f.key, Value: raw, Source: sourceOf(f.key), Msg: err.Error()})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := cfg.Validate(); err != nil {
		// Validate knows the values, not where they came from.
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				if ce, ok := e.(*Error); ok && ce.Source == "" {
					ce.Source = sourceOf(ce.Key)
				}
			}
		}
		return nil, err
	}
	return &cfg, nil
}

// readFile reads and parses a config file. It returns the settings to merge
// (sections that are not mappings left out) and the known keys the file sets,
// or errors naming the unknown keys and malformed sections.
func readFile(file string) (settings map[string]any, present map[string]bool, keyErrs []error, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("config: read config file: %w", err)
	}
	fv := viper.New()
	switch ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(file), ".")); ext {
	case "json", "toml", "yaml", "yml":
		fv.SetConfigType(ext)
	default:
		fv.SetConfigType("yaml")
	}
	if err := fv.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, nil, nil, fmt.Errorf("config: parse %s: %w", file, err)
	}
	settings = fv.AllSettings()

	known := map[string]bool{}
	sections := map[string]bool{}
	for _, k := range Keys() {
		known[k] = true
		s, _, _ := strings.Cut(k, ".")
		sections[s] = true
	}
	present = map[string]bool{}
	source := "file " + file
	// AllKeys lists every leaf, including those set to null; empty mappings
	// are not leaves.
	keys := fv.AllKeys()
	sort.Strings(keys)
	for _, k := range keys {
		if known[k] {
			present[k] = true
			continue
		}
		if sections[k] {
			val := fv.Get(k)
			if val == nil {
				continue // "node:" with nothing under it
			}
			keyErrs = append(keyErrs, &Error{Key: k, Value: val, Source: source,
				Msg: "expected a mapping of keys, got " + describe(val)})
			delete(settings, k)
			continue
		}
		if under := knownPrefix(k, known); under != "" {
			// A mapping where a value belongs: decoding reports it.
			present[under] = true
			continue
		}
		keyErrs = append(keyErrs, unknownKey(k, source, known))
	}
	return settings, present, keyErrs, nil
}

// knownPrefix returns the known key that k lies under, or "".
func knownPrefix(k string, known map[string]bool) string {
	for i := strings.LastIndex(k, "."); i > 0; i = strings.LastIndex(k[:i], ".") {
		if known[k[:i]] {
			return k[:i]
		}
	}
	return ""
}

func unknownKey(key, source string, known map[string]bool) error {
	msg := "unknown key"
	best, bestDist := "", 3
	for k := range known {
		if d := editDistance(key, k); d < bestDist || (d == bestDist && k < best) {
			best, bestDist = k, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", best)
	}
	return &Error{Key: key, Source: source, Msg: msg}
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// reflectValue returns the value ptr points to.
func reflectValue(ptr any) any {
	switch p := ptr.(type) {
	case *string:
		return *p
	case *bool:
		return *p
	case *int64:
		return *p
	case *[]string:
		return *p
	}
	panic(fmt.Sprintf("config: unsupported field type %T", ptr))
}

// assign converts raw (from viper: the file's decoded value, an environment
// or flag string, a flag's typed value or the default) and stores it in ptr.
// bytes says a number is a size, which may carry a KiB, MiB or GiB suffix;
// other numbers are plain counts.
func assign(ptr any, raw any, bytes bool) error {
	switch p := ptr.(type) {
	case *string:
		s, ok := raw.(string)
		if !ok {
			return fmt.Errorf("expected a string, got %s", describe(raw))
		}
		*p = s
	case *bool:
		switch b := raw.(type) {
		case bool:
			*p = b
		case string:
			v, err := strconv.ParseBool(strings.TrimSpace(b))
			if err != nil {
				return errors.New("expected true or false")
			}
			*p = v
		default:
			return fmt.Errorf("expected true or false, got %s", describe(raw))
		}
	case *int64:
		if s, ok := raw.(string); ok && !bytes {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return errors.New("expected a whole number")
			}
			*p = n
			return nil
		}
		n, err := toInt64(raw)
		if err != nil {
			if !bytes {
				return errors.New("expected a whole number")
			}
			return err
		}
		*p = n
	case *[]string:
		list, err := toStrings(raw)
		if err != nil {
			return err
		}
		*p = list
	default:
		panic(fmt.Sprintf("config: unsupported field type %T", ptr))
	}
	return nil
}

func toInt64(raw any) (int64, error) {
	switch n := raw.(type) {
	case int:
		return int64(n), nil
	case int8:
		return int64(n), nil
	case int16:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case int64:
		return n, nil
	case uint:
		if uint64(n) <= math.MaxInt64 {
			return int64(n), nil
		}
	case uint8:
		return int64(n), nil
	case uint16:
		return int64(n), nil
	case uint32:
		return int64(n), nil
	case uint64:
		if n <= math.MaxInt64 {
			return int64(n), nil
		}
	case float32:
		return floatToInt64(float64(n))
	case float64:
		return floatToInt64(n)
	case string:
		return ParseSize(n)
	default:
		return 0, fmt.Errorf("expected a number of bytes, got %s", describe(raw))
	}
	return 0, errors.New("number too large")
}

func floatToInt64(f float64) (int64, error) {
	if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, errors.New("expected a whole number of bytes")
	}
	if f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, errors.New("number too large")
	}
	return int64(f), nil
}

// ParseSize parses a whole number of bytes, optionally followed by KiB, MiB
// or GiB.
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s = strings.TrimSpace(strings.TrimSuffix(s, u.suffix))
			mult = u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("expected a whole number of bytes, optionally with a KiB, MiB or GiB suffix")
	}
	if n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return 0, errors.New("number too large")
	}
	return n * mult, nil
}

// toStrings accepts a list of strings or one comma-separated string. Blank
// entries are dropped; an empty result is nil.
func toStrings(raw any) ([]string, error) {
	var out []string
	add := func(s string) {
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	switch l := raw.(type) {
	case nil:
	case string:
		add(l)
	case []string:
		for _, s := range l {
			add(s)
		}
	case []any:
		for _, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("expected a list of strings, got an element that is %s", describe(e))
			}
			add(s)
		}
	default:
		return nil, fmt.Errorf("expected a list of strings, got %s", describe(raw))
	}
	return out, nil
}

// describe names the kind of a decoded value for error messages.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return "a number"
	case map[string]any, map[any]any:
		return "a mapping"
	case []any, []string:
		return "a list"
	}
	return fmt.Sprintf("a %T", v)
}
