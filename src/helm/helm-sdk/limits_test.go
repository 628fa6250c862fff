package main

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestListIndexesAreReadAsStrvalsReadsThem(t *testing.T) {
	cases := map[string][]listIndex{
		"a[3].b[5]=x":                {{"a", 3}, {"a[3].b", 5}},
		"a[1][2]=x":                  {{"a", 1}, {"a[1]", 2}},
		`a\[7]=x`:                    nil,
		"a[+65535]=x":                {{"a", 65535}},
		`a[\6\5535]=x`:               {{"a", 65535}},
		"a[-1]=x":                    nil,
		"a[x]=x":                     nil,
		"a=b[70000]":                 nil,
		"a[99999999999999999999999]": {{"a", math.MaxInt}},
	}
	for expr, want := range cases {
		if got := listIndexes(expr); !reflect.DeepEqual(got, want) {
			t.Errorf("listIndexes(%q) = %v, want %v", expr, got, want)
		}
	}
}

func TestAHugeListIndexIsRefusedBeforeStrvalsBuildsTheList(t *testing.T) {
	for _, set := range []string{"k[65535]=1", "k[1025]=1", "k[+65535]=1", `k[\6\5535]=1`} {
		_, err := values(request{Set: []string{set}})
		if err == nil || !strings.HasPrefix(err.Error(), "failed parsing --set data: list index") {
			t.Errorf("%s: got %v, want a refusal", set, err)
		}
	}
}

func TestListsWithinTheBoundsAreBuiltAsHelmBuildsThem(t *testing.T) {
	sets := []string{"env[1024].name=x", "env[0].name=y", "replicaCount=2"}
	got, err := values(request{Values: json.RawMessage(`{"a": 1}`), Set: sets})
	if err != nil {
		t.Fatal(err)
	}
	env := got["env"].([]any)
	if len(env) != 1025 || got["replicaCount"] != int64(2) || got["a"] != float64(1) {
		t.Errorf("got %d elements, %v", len(env), got["replicaCount"])
	}
}

func TestManyListsOverTheRequestBoundAreRefused(t *testing.T) {
	var sets []string
	for i := range 11 {
		sets = append(sets, fmt.Sprintf("l%d[1024]=x", i))
	}
	_, err := values(request{Set: sets})
	if err == nil || !strings.Contains(err.Error(), "lists of 11275 elements in all") {
		t.Errorf("got %v", err)
	}
	// One list named by many keys counts once.
	sets = nil
	for i := range 1000 {
		sets = append(sets, fmt.Sprintf("env[%d].name=x", i))
	}
	if _, err := values(request{Set: sets}); err != nil {
		t.Error(err)
	}
}
