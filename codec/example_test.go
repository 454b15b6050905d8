package codec_test

import (
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
)

func ExampleDecoder_Decode() {
	body := codec.AppendReport(nil, &codec.Report{NodeID: 3, Flows: []flowstate.Flow{
		{ID: 7, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 1024, LastExecTime: 1_700_000_000_000},
	}})

	d := codec.Decoder{MaxFlows: 100_000} // reuse it for every report
	var r codec.Report
	if err := d.Decode(body, &r); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.NodeID, r.Value())

	// {"node_id": -1}
	err := d.Decode([]byte{0x81, 0xa7, 'n', 'o', 'd', 'e', '_', 'i', 'd', 0xff}, &r)
	var de *codec.DecodeError
	if errors.As(err, &de) {
		fmt.Println(de.Kind, errors.Is(err, codec.ErrInvalidReport), err)
	}
	// Output:
	// 3 {map[7:1024] map[7:1700000000000] map[]}
	// out_of_range true codec: node_id: negative value -1
}

func ExampleAppendAggregate() {
	flows := []flowstate.Flow{
		{ID: 1, Has: flowstate.HasStateSize, StateSize: 1024},
		{ID: 2, Has: flowstate.HasStateSize | flowstate.HasStartTime, StateSize: 2048, StartTime: -1},
	}
	fmt.Printf("% x\n", codec.AppendAggregate(nil, flows))
	fmt.Printf("%s\n", flowstate.AppendJSON(nil, flows)) // the JSON form
	// Output:
	// 83 aa 73 74 61 74 65 5f 73 69 7a 65 82 01 cd 04 00 02 cd 08 00 b2 6c 61 73 74 5f 65 78 65 63 5f 74 69 6d 65 5f 6d 61 70 80 ae 73 74 61 72 74 5f 74 69 6d 65 5f 6d 61 70 81 02 ff
	// {"state_size":{"1":1024,"2":2048},"last_exec_time_map":{},"start_time_map":{"2":-1}}
}
