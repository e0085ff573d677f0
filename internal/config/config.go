// Package config makes the flag tags of a component's Config the one
// statement of its defaults. A component's DefaultConfig is Defaults of its
// Config, read from the same tags, with the same ${variables}, as the
// command line of `eventforge <command>`: a program that starts from
// DefaultConfig runs with what the binary runs without flags, and a default
// changes in one place.
//
// Vars are the variables every EventForge command line passes to its
// parser: the defaults that are part of the event contract (package
// contract), plus whatever a caller adds (the consumer registry's choices,
// registry.FlagVars).
package config

import (
	"fmt"
	"io"
	"maps"
	"reflect"

	"github.com/alecthomas/kong"

	"github.com/eventforge/eventforge/contract"
)

// contractVars are the ${variables} of the defaults that package contract
// names.
var contractVars = map[string]string{
	"database_url":    contract.DatabaseURL,
	"kafka_brokers":   contract.KafkaBrokers,
	"topic":           contract.Topic,
	"slot":            contract.Slot,
	"publication":     contract.Publication,
	"aggregate_order": contract.AggregateOrder,
}

// Vars returns the variables flag tags may name: the contract's, and those
// of more (a later map wins over an earlier one). Pass the result to the
// parser of a command line (it is a kong.Option) and the same maps to
// Defaults.
func Vars(more ...map[string]string) kong.Vars {
	vars := kong.Vars(maps.Clone(contractVars))
	for _, m := range more {
		maps.Copy(vars, m)
	}
	return vars
}

// Defaults returns the T that T's flag tags describe: each field with a
// default tag holds that default, parsed as kong parses it from a command
// line (${variables} from Vars(more...), durations, lists, maps), and every
// other field its zero value. Environment variables and required flags
// play no part: the result is what the tags say, whatever the process's
// environment.
//
// T is a struct of flags as kong reads them. A tag that does not parse,
// names a variable Vars lacks or defaults to a value outside its enum is a
// mistake in the code, so Defaults panics; every component's tests call its
// DefaultConfig.
func Defaults[T any](more ...map[string]string) T {
	var cfg T
	if err := setDefaults(&cfg, Vars(more...)); err != nil {
		panic(fmt.Sprintf("config.Defaults[%T]: %v", cfg, err))
	}
	return cfg
}

// setDefaults sets every flag of target (a pointer to a struct) to its
// default, or to its zero value when it has none: what kong does for a flag
// left off the command line, without the environment.
func setDefaults(target any, vars kong.Vars) error {
	parser, err := kong.New(target, vars, kong.Writers(io.Discard, io.Discard))
	if err != nil {
		return err
	}
	return kong.Visit(parser.Model, func(node kong.Visitable, next kong.Next) error {
		v, ok := node.(*kong.Value)
		if !ok || !v.Target.IsValid() {
			return next(nil)
		}
		v.Target.Set(reflect.Zero(v.Target.Type()))
		if !v.HasDefault {
			return next(nil)
		}
		if err := v.Parse(kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: v.Default}), v.Target); err != nil {
			return next(fmt.Errorf("--%s: default %q: %w", v.Name, v.Default, err))
		}
		return next(checkChoices(v))
	})
}

// checkChoices refuses a default that is not among the flag's choices (its
// enum tag), as the parser refuses such a flag.
func checkChoices(v *kong.Value) error {
	if v.Enum == "" {
		return nil
	}
	values := []reflect.Value{v.Target}
	if v.Target.Kind() == reflect.Slice {
		values = values[:0]
		for i := range v.Target.Len() {
			values = append(values, v.Target.Index(i))
		}
	}
	for _, value := range values {
		if s := fmt.Sprint(value.Interface()); !v.EnumMap()[s] {
			return fmt.Errorf("--%s: default %q is not one of %q", v.Name, s, v.Enum)
		}
	}
	return nil
}
