package state_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/flowstate-io/flowstate/state"
)

func TestStoredBytesAreSerdeJSONForm(t *testing.T) {
	m := newManager(t, state.Options{})

	merge(t, m, 10, value(sizes{10: 1000, 2: 200}, times{10: -1, 2: 1700000000000}, nil))
	merge(t, m, 2, value(sizes{2: 300}, times{2: 5}, times{2: 1}))
	merge(t, m, 3, value(nil, nil, nil))

	dump := m.Dump()
	assert.Equal(t, map[string]string{
		"__flow/state/node/10": `{"state_size":{"2":200,"10":1000},"last_exec_time_map":{"2":1700000000000,"10":-1},"start_time_map":{}}`,
		"__flow/state/node/2":  `{"state_size":{"2":300},"last_exec_time_map":{"2":5},"start_time_map":{"2":1}}`,
		"__flow/state/node/3":  `{"state_size":{},"last_exec_time_map":{},"start_time_map":{}}`,
		"__flow/state":         `{"state_size":{"2":300,"10":1000},"last_exec_time_map":{"2":1700000000000,"10":-1},"start_time_map":{"2":1}}`,
	}, stringValues(dump))
}

func stringValues(m map[string][]byte) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}
