package e2e

import (
	"encoding/hex"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unhex decodes hex written with spaces and newlines for reading.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	require.NoError(t, err)
	return b
}

// Hand-written msgpack: the three keys of the aggregate.
const (
	hexStateSize    = "aa 73746174655f73697a65"                 // "state_size"
	hexLastExecTime = "b2 6c6173745f657865635f74696d655f6d6170" // "last_exec_time_map"
	hexStartTime    = "ae 73746172745f74696d655f6d6170"         // "start_time_map"
	hexEmptyValue   = "83" + hexStateSize + "80" + hexLastExecTime + "80" + hexStartTime + "80"
)

// TestGetBeforeAnyReportIsEmptyAtRevisionZero requires the empty value at
// revision 0, in both encodings.
func TestGetBeforeAnyReportIsEmptyAtRevisionZero(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL)
	c := newClient(t, w)

	m := c.get()
	assert.Zero(t, m.Revision)
	assert.Equal(t, unhex(t, hexEmptyValue), m.Body, "msgpack empty value")

	j := c.getJSON()
	assert.Zero(t, j.Revision)
	assert.Equal(t, m.Epoch, j.Epoch)
	assert.Equal(t, emptyValueJSON, string(j.Body))
}

// TestGetEncodesCanonicalMsgpackAndSerdeJSON compares both encodings of a
// small aggregate with bytes written by hand.
func TestGetEncodesCanonicalMsgpackAndSerdeJSON(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL)
	c := newClient(t, w)
	ack := c.report(1, msgpackReport(t, 1, flowState{
		StateSize:    map[uint32]uint64{10: 7, 2: 5},
		LastExecTime: map[uint32]int64{2: 1700000000000},
	}, stringKeys))

	m := c.get()
	assert.Equal(t, ack, m.version)
	assert.Equal(t, unhex(t, "83"+
		hexStateSize+"82 02 05 0a 07"+
		hexLastExecTime+"81 02 cf 0000018bcfe56800"+
		hexStartTime+"80"), m.Body)

	j := c.getJSON()
	assert.Equal(t, ack, j.version)
	assert.Equal(t, `{"state_size":{"2":5,"10":7},"last_exec_time_map":{"2":1700000000000},"start_time_map":{}}`, string(j.Body))
}

// TestGetWritesEveryIntegerInItsShortestForm covers each msgpack integer
// form at its bounds, with bytes written by hand.
func TestGetWritesEveryIntegerInItsShortestForm(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL)
	c := newClient(t, w)
	report := flowState{
		StateSize: map[uint32]uint64{
			0: 0, 127: 127, 128: 128, 255: 255, 256: 256, 65535: 65535, 65536: 65536,
			4294967294: math.MaxUint64, 4294967295: 4294967296,
		},
		LastExecTime: map[uint32]int64{
			1: -1, 2: -32, 3: -33, 4: -128, 5: -129, 6: -32768, 7: -32769,
			8: math.MinInt32, 9: math.MinInt32 - 1, 10: math.MinInt64, 11: math.MaxInt64,
		},
		StartTime: map[uint32]int64{12: 0},
	}
	c.report(1, msgpackReport(t, 1, report, intKeys))

	assert.Equal(t, unhex(t, "83"+
		hexStateSize+`89
			00 00
			7f 7f
			cc80 cc80
			ccff ccff
			cd0100 cd0100
			cdffff cdffff
			ce00010000 ce00010000
			cefffffffe cfffffffffffffffff
			ceffffffff cf0000000100000000`+
		hexLastExecTime+`8b
			01 ff
			02 e0
			03 d0df
			04 d080
			05 d1ff7f
			06 d18000
			07 d2ffff7fff
			08 d280000000
			09 d3ffffffff7fffffff
			0a d38000000000000000
			0b cf7fffffffffffffff`+
		hexStartTime+"81 0c 00"), c.get().Body)

	assert.Equal(t, `{"state_size":{"0":0,"127":127,"128":128,"255":255,"256":256,"65535":65535,"65536":65536,`+
		`"4294967294":18446744073709551615,"4294967295":4294967296},`+
		`"last_exec_time_map":{"1":-1,"2":-32,"3":-33,"4":-128,"5":-129,"6":-32768,"7":-32769,`+
		`"8":-2147483648,"9":-2147483649,"10":-9223372036854775808,"11":9223372036854775807},`+
		`"start_time_map":{"12":0}}`, string(c.getJSON().Body))
}

// TestGetAcceptHeaderChoosesEncoding requires JSON only for Accept:
// application/json, and msgpack for any other value or none.
func TestGetAcceptHeaderChoosesEncoding(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL)
	c := newClient(t, w)
	s := flowState{StateSize: map[uint32]uint64{3: 30}, LastExecTime: map[uint32]int64{3: 3}}
	ack := c.report(4, codecReport(4, s))
	for _, tc := range []struct {
		accept, contentType string
	}{
		{"", contentMsgpack},
		{"application/json", contentJSON},
		{"application/msgpack", contentMsgpack},
		{"text/plain", contentMsgpack},
		{"*/*", contentMsgpack},
	} {
		m := c.getAccept(tc.accept)
		assert.Equal(t, tc.contentType, m.ContentType, "Accept %q", tc.accept)
		assert.Equal(t, ack, m.version, "Accept %q", tc.accept)
		if tc.contentType == contentJSON {
			assert.Equal(t, string(serdeJSON(s)), string(m.Body), "Accept %q", tc.accept)
		} else {
			assert.Equal(t, canonicalMsgpack(s), m.Body, "Accept %q", tc.accept)
		}
	}
}
