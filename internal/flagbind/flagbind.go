// Package flagbind derives command-line flags from a settings struct, so
// that a setting is declared once (its field, YAML key, default and help)
// and the command line and the config file cannot drift apart.
//
// Each exported field with a `yaml:"key"` tag and a `help:"…"` tag becomes
// the flag --key (underscores as dashes) bound to the field, its default
// the field's current value. A bool field that is true by default becomes
// --no-key, which sets it false. Kinds: string (named string types too),
// bool, int, float64; any other kind is a programming error (a panic at
// binding, which tests exercise).
package flagbind

import (
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Bind binds the tagged fields of the struct ptr points to as flags of fs.
func Bind(fs *flag.FlagSet, ptr any) {
	v := reflect.ValueOf(ptr).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		help := f.Tag.Get("help")
		if !f.IsExported() || key == "" || key == "-" || help == "" {
			continue
		}
		name := strings.ReplaceAll(key, "_", "-")
		fv := v.Field(i)
		switch fv.Kind() {
		case reflect.String:
			fs.Func(name, fmt.Sprintf("%s (default %q)", help, fv.String()), func(s string) error { fv.SetString(s); return nil })
		case reflect.Bool:
			if fv.Bool() {
				fs.BoolFunc("no-"+name, help+" (sets "+key+" false; default true)", func(s string) error {
					b, err := strconv.ParseBool(s)
					fv.SetBool(!b)
					return err
				})
			} else {
				fs.BoolVar(fv.Addr().Interface().(*bool), name, false, help)
			}
		case reflect.Int:
			fs.IntVar(fv.Addr().Interface().(*int), name, int(fv.Int()), help)
		case reflect.Float64:
			fs.Float64Var(fv.Addr().Interface().(*float64), name, fv.Float(), help)
		default:
			panic(fmt.Sprintf("flagbind: field %s of %s has kind %s", f.Name, t, fv.Kind()))
		}
	}
}
