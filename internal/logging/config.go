package logging

import (
	"log/slog"
	"reflect"
	"strings"
)

// masked replaces a secret that is set.
const masked = "xxxxx"

// ConfigValue is the slog value of a configuration struct (or a pointer to
// one) as the command line knows it: one attribute per flag, that is per
// field with a kong `name` tag, keyed by the flag name in snake_case, in
// declaration order. Embedded structs (`embed` tag or anonymous) contribute
// their flags; fields without a flag name are left out. Secrets are masked
// by the field's `log` tag:
//
//	log:"secret"  the value shows as xxxxx when set (tokens, keys, passwords)
//	log:"url"     the value shows as MaskURL shows it (connection URLs)
//
// Each component's Config.LogValue returns it, so a new flag appears in the
// startup line without a change to the logging code.
func ConfigValue(cfg any) slog.Value {
	v := reflect.ValueOf(cfg)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return slog.GroupValue()
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return slog.AnyValue(cfg)
	}
	return slog.GroupValue(configAttrs(v)...)
}

func configAttrs(v reflect.Value) []slog.Attr {
	var attrs []slog.Attr
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if _, embed := f.Tag.Lookup("embed"); (embed || f.Anonymous) && f.Type.Kind() == reflect.Struct {
			attrs = append(attrs, configAttrs(v.Field(i))...)
			continue
		}
		name := f.Tag.Get("name")
		if name == "" || f.Tag.Get("kong") == "-" {
			continue
		}
		attrs = append(attrs, slog.Any(strings.ReplaceAll(name, "-", "_"), fieldValue(f, v.Field(i))))
	}
	return attrs
}

// fieldValue is what the log shows of field f's value fv.
func fieldValue(f reflect.StructField, fv reflect.Value) any {
	switch f.Tag.Get("log") {
	case "secret":
		if fv.IsZero() {
			return ""
		}
		return masked
	case "url":
		if fv.Kind() == reflect.String {
			return MaskURL(fv.String())
		}
	}
	return fv.Interface()
}
