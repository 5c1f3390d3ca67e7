package chaos

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// recordingName is the file in a run's directory that keeps what it
// recorded: the probes, the holders, the faults, the checks.
const recordingName = "recording.json.gz"

// recording is a run as recorded: enough to judge it again.
type recording struct {
	Options  Options
	Target   string
	Settings []string
	Result   *Result
}

func save(path string, r recording) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	z := gzip.NewWriter(f)
	if err := json.NewEncoder(z).Encode(r); err != nil {
		return err
	}
	return z.Close()
}

// Reanalyse judges the run recorded in dir again, with this build's
// analysis, and writes its report and pictures into out: a change of the
// judgement is tried on past runs without running them again.
func Reanalyse(dir, out string) (*Result, error) {
	f, err := os.Open(filepath.Join(dir, recordingName))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	var r recording
	if err := json.NewDecoder(z).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	if r.Result == nil || r.Result.Data == nil {
		return nil, fmt.Errorf("%s: no data recorded", f.Name())
	}
	res := r.Result
	if res.Data.Advert == 0 {
		// Recorded before Data kept it.
		res.Data.Advert = fleetAdvert(r.Options)
	}
	res.Pictures, res.Report = nil, ""
	res.Analysis = Analyse(res.Data)
	o := r.Options
	o.Out = out
	return res, writeReport(o, r.Target, r.Settings, res)
}
