package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
)

// JSON has no NaN or infinity, yet a diverged run has a NaN loss and the API
// must still describe it. marshal encodes such values as null: it swaps each
// non-finite float in a copy of v for a sentinel no real metric takes, then
// replaces the sentinel's encoding with null. The slow path runs only after
// the plain encoding failed.
const (
	sentinel64 = -1.2345678912345678e-300
	sentinel32 = float32(-1.234567e-30)
)

// The sentinels' encodings are taken from encoding/json itself, so they
// match byte for byte whatever its float formatting.
var (
	sentinel64JSON, _ = json.Marshal(sentinel64)
	sentinel32JSON, _ = json.Marshal(sentinel32)
)

func marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	var unsupported *json.UnsupportedValueError
	if err == nil || !errors.As(err, &unsupported) {
		return b, err
	}
	c := finiteCopy(reflect.ValueOf(v))
	if !c.IsValid() {
		return json.Marshal(nil)
	}
	if b, err = json.Marshal(c.Interface()); err != nil {
		return nil, err
	}
	b = bytes.ReplaceAll(b, sentinel64JSON, []byte("null"))
	return bytes.ReplaceAll(b, sentinel32JSON, []byte("null")), nil
}

// finiteCopy returns a copy of v in which every non-finite float reachable
// through exported fields, pointers, slices, arrays, maps and interfaces is
// a sentinel. It never writes to v's memory: the values it walks may be
// shared with the node.
func finiteCopy(v reflect.Value) reflect.Value {
	if !v.IsValid() {
		return v
	}
	switch v.Kind() {
	case reflect.Float64, reflect.Float32:
		f := v.Float()
		if !math.IsNaN(f) && !math.IsInf(f, 0) {
			return v
		}
		out := reflect.New(v.Type()).Elem()
		if v.Kind() == reflect.Float32 {
			out.SetFloat(float64(sentinel32))
		} else {
			out.SetFloat(sentinel64)
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		out := reflect.New(v.Type().Elem())
		out.Elem().Set(finiteCopy(v.Elem()))
		return out
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		out := reflect.New(v.Type()).Elem()
		out.Set(finiteCopy(v.Elem()))
		return out
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		out.Set(v)
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out.Field(i).Set(finiteCopy(v.Field(i)))
			}
		}
		return out
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(finiteCopy(v.Index(i)))
		}
		return out
	case reflect.Array:
		out := reflect.New(v.Type()).Elem()
		for i := range v.Len() {
			out.Index(i).Set(finiteCopy(v.Index(i)))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		it := v.MapRange()
		for it.Next() {
			out.SetMapIndex(it.Key(), finiteCopy(it.Value()))
		}
		return out
	}
	return v
}
