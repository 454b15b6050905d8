package client

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileVectors is testdata/vectors/hostile.json: replies a peer that is
// not the worker could send, read the same way by the Go client, the Rust
// crate and the JavaScript client.
type hostileVectors struct {
	MaxChunks    int `json:"max_chunks"`
	ChunkHeaders []struct {
		Header string `json:"header"`
		I, N   int
	} `json:"chunk_headers"`
	ErrorCodes []struct {
		Code string `json:"code"`
		Want int    `json:"want"`
	} `json:"error_codes"`
	Reasons []struct {
		Reason string `json:"reason"`
		Repeat int    `json:"repeat"`
		Want   string `json:"want"`
	} `json:"reasons"`
}

func readHostileVectors(t *testing.T) hostileVectors {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "vectors", "hostile.json"))
	require.NoError(t, err)
	var v hostileVectors
	require.NoError(t, json.Unmarshal(b, &v))
	require.NotEmpty(t, v.ChunkHeaders)
	return v
}

func TestHostileVectors(t *testing.T) {
	v := readHostileVectors(t)
	assert.Equal(t, maxChunks, v.MaxChunks)
	for _, c := range v.ChunkHeaders {
		i, n, err := parseChunk(c.Header)
		if c.N == 0 {
			assert.ErrorIs(t, err, ErrBadReply, "%q is refused", c.Header)
			continue
		}
		if assert.NoError(t, err, "%q", c.Header) {
			assert.Equal(t, [2]int{c.I, c.N}, [2]int{i, n}, "%q", c.Header)
		}
	}
	for _, c := range v.ErrorCodes {
		assert.Equal(t, c.Want, newServiceError("s", c.Code, "r").Code, "code %q", c.Code)
	}
	for _, c := range v.Reasons {
		reason := c.Reason
		if c.Repeat > 0 {
			reason = strings.Repeat(reason, c.Repeat)
		}
		assert.Equal(t, c.Want, newServiceError("s", "500", reason).Reason, "reason %.40q", reason)
	}
}
