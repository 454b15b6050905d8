package chaos

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// dumpOp is op in a form encoding/json writes, for replaying a check.
type dumpOp struct {
	Client      int
	Kind        opKind
	Node        int
	Report      report
	NodeEpoch   uint64 `json:",omitempty"`
	Seq         uint64 `json:",omitempty"`
	Why         string
	Status      status
	Code, Epoch string
	Rev         uint64
	Agg         report
	Marks       [nNodes][2]uint64 `json:",omitzero"` // node_epoch and seq per node
	Alien       bool
	Call, Ret   int64
}

func dumpHistory(path string, ops []op) error {
	out := make([]dumpOp, len(ops))
	for i, o := range ops {
		var marks [nNodes][2]uint64
		for n, m := range o.out.marks {
			marks[n] = [2]uint64{m.epoch, m.seq}
		}
		out[i] = dumpOp{o.client, o.in.kind, o.in.node, o.in.report, o.in.nodeEpoch, o.in.seq, o.in.why, o.out.status, o.out.code, o.out.epoch, o.out.rev, o.out.agg, marks, o.out.alien, o.call, o.ret}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func loadHistory(path string) ([]op, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var in []dumpOp
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	ops := make([]op, len(in))
	for i, d := range in {
		var marks [nNodes]mark
		for n, m := range d.Marks {
			marks[n] = mark{m[0], m[1]}
		}
		ops[i] = op{client: d.Client, in: input{kind: d.Kind, node: d.Node, report: d.Report, nodeEpoch: d.NodeEpoch, seq: d.Seq, why: d.Why},
			out: output{status: d.Status, code: d.Code, epoch: d.Epoch, rev: d.Rev, agg: d.Agg, marks: marks, alien: d.Alien}, call: d.Call, ret: d.Ret}
	}
	return ops, nil
}

// checkInputs is what a check takes besides the history (check): the start
// of each memory worker instance's epoch and when every store was rolled
// back, written beside a dumped history so that a replay checks kept
// epochs as the run did.
type checkInputs struct {
	Opens   map[string]int64 `json:",omitempty"`
	Forgets []int64          `json:",omitempty"`
}

// checkInputsFile is the name of the checkInputs beside a history.
const checkInputsFile = "check.json"

func dumpCheckInputs(path string, in checkInputs) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// loadCheckInputs reads the checkInputs beside the history at path; none
// (a history dumped without them) is no error.
func loadCheckInputs(history string) (checkInputs, error) {
	var in checkInputs
	b, err := os.ReadFile(filepath.Join(filepath.Dir(history), checkInputsFile))
	if os.IsNotExist(err) {
		return in, nil
	}
	if err != nil {
		return in, err
	}
	return in, json.Unmarshal(b, &in)
}
