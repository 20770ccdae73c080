package bench

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactrl/compactrl/internal/cputime"
	"github.com/compactrl/compactrl/kernel"
)

// Rules decide when a ratio Run measured is not a valid comparison. Other
// load distorts ratios on a shared machine, and not evenly: PyTorch's MKL
// loses more to a busy core than the built-in engine does, and the FMA peak
// under-reads, so a loaded run can print any ratio.
type Rules struct {
	// MinShare is the least CPU share (CPU time ÷ (wall · threads)) either
	// side of a ratio may have had: below it, other load had its cores.
	MinShare float64 `json:"min_share"`
	// PeakAgreement is the least ratio of a peak measurement to the best
	// one (and to the quiet peak, when one is given): a peak far below
	// another was measured on a loaded machine. The read bandwidth
	// measurements are held to it the same way.
	PeakAgreement float64 `json:"peak_agreement"`
	// MaxSteal is the largest fraction of the machine's CPU time the
	// hypervisor may have taken (steal time in /proc/stat) during the run.
	MaxSteal float64 `json:"max_steal"`
}

// DefaultRules: both sides at least 0.9 of their threads, every peak
// within 10% of the best (and of the quiet one), at most 5% steal time.
// The load average may not exceed the thread count before the run (after
// it, twice the thread count: the run's own threads count in it then).
var DefaultRules = Rules{MinShare: 0.9, PeakAgreement: 0.9, MaxSteal: 0.05}

// Validity says whether a ratio (or a whole run) is a valid comparison,
// and if not, why.
type Validity struct {
	Valid   bool     `json:"valid"`
	Reasons []string `json:"reasons,omitempty"`
}

func validity(reasons []string) Validity { return Validity{Valid: len(reasons) == 0, Reasons: reasons} }

// String is "valid" or "INVALID: reason; reason".
func (v Validity) String() string {
	if v.Valid {
		return "valid"
	}
	return "INVALID: " + strings.Join(v.Reasons, "; ")
}

// PeakMeasure is one measurement of the float32 FMA peak on Threads
// threads (kernel.MeasurePeakGFLOPS, best of 10 windows) with the CPU share
// the measuring process had.
type PeakMeasure struct {
	When     string  `json:"when"`
	Threads  int     `json:"threads"`
	GFLOPS   float64 `json:"gflops"`
	CPUShare float64 `json:"cpu_share"`
}

// measurePeak measures the FMA peak on threads threads for about d.
func measurePeak(when string, threads int, d time.Duration) PeakMeasure {
	c0, t0 := cputime.Process(), time.Now()
	g := kernel.MeasurePeakGFLOPS(threads, d)
	return PeakMeasure{When: when, Threads: threads, GFLOPS: g, CPUShare: cpuShare(cputime.Process()-c0, time.Since(t0), threads)}
}

// BandwidthMeasure is one measurement of the machine's streaming read
// bandwidth on Threads threads (measureBandwidth: best of 10 windows over a
// buffer far larger than the caches) with the CPU share it had. The FMA
// peak does not see other machines on the host contending for memory and
// cache; this does.
type BandwidthMeasure struct {
	When     string  `json:"when"`
	Threads  int     `json:"threads"`
	GBps     float64 `json:"gbps"`
	CPUShare float64 `json:"cpu_share"`
}

// measureBandwidth reads a buffer of bytes (each thread its own contiguous
// part, with kernel.Dot) for 10 windows of about d/10 and returns the best
// window's rate in GB/s. The buffer lives only while it is measured.
func measureBandwidth(when string, threads int, d time.Duration, bytes int) BandwidthMeasure {
	buf := make([]float32, bytes/4)
	for i := range buf {
		buf[i] = 1 // every page touched before it is timed
	}
	c0, t0 := cputime.Process(), time.Now()
	part := len(buf) / threads
	const chunk = 1 << 14
	var best float64
	for range 10 {
		var wg sync.WaitGroup
		read := make([]int, threads)
		w0 := time.Now()
		deadline := w0.Add(d / 10)
		for t := range threads {
			wg.Go(func() {
				x := buf[t*part : (t+1)*part]
				for i := 0; ; i += chunk {
					if i+chunk > len(x) {
						i = 0
						if time.Now().After(deadline) {
							break
						}
					}
					kernel.Dot(x[i:i+chunk], x[i:i+chunk])
					read[t] += 4 * chunk
				}
			})
		}
		wg.Wait()
		total := 0
		for _, r := range read {
			total += r
		}
		best = max(best, float64(total)/time.Since(w0).Seconds()/1e9)
	}
	return BandwidthMeasure{When: when, Threads: threads, GBps: best, CPUShare: cpuShare(cputime.Process()-c0, time.Since(t0), threads)}
}

// Conditions are what a run measured about the machine rather than the
// engines: they decide whether any of its ratios holds.
type Conditions struct {
	Threads    int           `json:"threads"`
	Load1Start float64       `json:"load1_start"` // 1-minute load average before the run (−1 unknown)
	Load1End   float64       `json:"load1_end"`   // and after it
	Peaks      []PeakMeasure `json:"peaks"`
	QuietPeak  float64       `json:"quiet_peak,omitempty"` // a peak measured on the quiet machine earlier (0: none given)
	// Bandwidth: the streaming read bandwidth before and after the run
	// (reports written before it was measured have none, and are judged
	// without it).
	Bandwidth      []BandwidthMeasure `json:"bandwidth,omitempty"`
	QuietBandwidth float64            `json:"quiet_bandwidth,omitempty"` // measured on the quiet machine earlier (0: none given)
	Steal          float64            `json:"steal"`                     // fraction of CPU time stolen during the run (−1 unknown)
}

// reasons lists what makes every ratio of the run invalid under rules.
func (c Conditions) reasons(rules Rules) []string {
	var out []string
	switch {
	case c.Load1Start < 0:
		out = append(out, "load average unknown")
	case c.Load1Start > float64(c.Threads):
		out = append(out, fmt.Sprintf("load average %.2f before the run exceeds the %d threads", c.Load1Start, c.Threads))
	}
	if c.Load1End > 2*float64(c.Threads) {
		out = append(out, fmt.Sprintf("load average %.2f after the run exceeds twice the %d threads (its own plus as many more)", c.Load1End, c.Threads))
	}
	if c.Steal > rules.MaxSteal {
		out = append(out, fmt.Sprintf("%.0f%% of CPU time stolen by the hypervisor (limit %.0f%%)", 100*c.Steal, 100*rules.MaxSteal))
	}
	if len(c.Peaks) == 0 {
		return append(out, "no FMA peak measured")
	}
	peaks := make([]condMeasure, len(c.Peaks))
	for i, p := range c.Peaks {
		peaks[i] = condMeasure{p.When, p.Threads, p.GFLOPS, p.CPUShare}
	}
	best, rs := agreement(rules, "the FMA peak", "GFLOP/s", num, peaks)
	out = append(out, rs...)
	if c.QuietPeak > 0 && best < rules.PeakAgreement*c.QuietPeak {
		out = append(out, fmt.Sprintf("the best FMA peak (%s GFLOP/s) is %.0f%% of the quiet machine's %s", num(best), 100*best/c.QuietPeak, num(c.QuietPeak)))
	}
	bws := make([]condMeasure, len(c.Bandwidth))
	for i, b := range c.Bandwidth {
		bws[i] = condMeasure{b.When, b.Threads, b.GBps, b.CPUShare}
	}
	bestBW, rs := agreement(rules, "the read bandwidth", "GB/s", func(v float64) string { return fmt.Sprintf("%.1f", v) }, bws)
	out = append(out, rs...)
	switch {
	case c.QuietBandwidth > 0 && len(c.Bandwidth) == 0:
		out = append(out, "a quiet read bandwidth was given but none measured")
	case c.QuietBandwidth > 0 && bestBW < rules.PeakAgreement*c.QuietBandwidth:
		out = append(out, fmt.Sprintf("the best read bandwidth (%.1f GB/s) is %.0f%% of the quiet machine's %.1f: other load contends for memory", bestBW, 100*bestBW/c.QuietBandwidth, c.QuietBandwidth))
	}
	return out
}

// condMeasure is one measurement of the machine (an FMA peak, a read
// bandwidth) for agreement.
type condMeasure struct {
	when    string
	threads int
	value   float64
	share   float64
}

// agreement returns the best of ms and the reasons any of them makes the
// run invalid: under rules.MinShare of its threads, or under
// rules.PeakAgreement of the best (what names the measurement, format
// prints a value in unit).
func agreement(rules Rules, what, unit string, format func(float64) string, ms []condMeasure) (best float64, out []string) {
	for _, m := range ms {
		best = max(best, m.value)
	}
	for _, m := range ms {
		if m.share < rules.MinShare {
			out = append(out, fmt.Sprintf("%s %s had %.2f of %d cores (%s, under %.0f%%)", what, m.when, m.share*float64(m.threads), m.threads, shareWord(m.share), 100*rules.MinShare))
		}
		if !(m.value >= rules.PeakAgreement*best) {
			out = append(out, fmt.Sprintf("%s %s (%s %s) is %.0f%% of the best (%s)", what, m.when, format(m.value), unit, 100*m.value/best, format(best)))
		}
	}
	return best, out
}

// shareReasons says why a measurement's CPU share makes its ratio invalid.
func shareReasons(rules Rules, side string, m Measure, threads int) []string {
	switch {
	case m.CPUShare <= 0:
		return []string{side + ": CPU time unknown"}
	case m.CPUShare < rules.MinShare:
		return []string{fmt.Sprintf("%s had %.2f of %d cores (%s, under %.0f%%)", side, m.CPUShare*float64(threads), threads, shareWord(m.CPUShare), 100*rules.MinShare)}
	}
	return nil
}

func shareWord(s float64) string {
	return fmt.Sprintf("%.0f%% of its threads' time", 100*s)
}

// Comparison is one ratio of the report: ours over the reference's median
// rate, each interleaved round's ratio, and whether it is valid.
type Comparison struct {
	Ratio       float64   `json:"ratio"`
	RoundRatios []float64 `json:"round_ratios,omitempty"`
	Validity    Validity  `json:"validity"`
}

// compare judges ours against ref on a run whose conditions gave run.
func compare(rules Rules, run []string, threads int, ours Measure, refSide string, ref Measure) Comparison {
	c := Comparison{Ratio: math.NaN()}
	if ref.Value > 0 {
		c.Ratio = ours.Value / ref.Value
	}
	if len(ours.Rounds) == len(ref.Rounds) && len(ours.Rounds) > 1 {
		for i := range ours.Rounds {
			c.RoundRatios = append(c.RoundRatios, ours.Rounds[i]/ref.Rounds[i])
		}
	}
	reasons := append([]string{}, run...)
	reasons = append(reasons, shareReasons(rules, "compactrl", ours, threads)...)
	if refSide != "" {
		reasons = append(reasons, shareReasons(rules, refSide, ref, threads)...)
	}
	c.Validity = validity(reasons)
	return c
}

// mfuValidity judges an engine's MFU: the run's conditions (the peak is
// its denominator) and the engine's own CPU share.
func mfuValidity(rules Rules, run []string, side string, m Measure, threads int) Validity {
	return validity(append(append([]string{}, run...), shareReasons(rules, side, m, threads)...))
}

// MFU is model-FLOP utilisation: tokensPerS · flopsPerToken over the FMA
// peak (GFLOP/s).
func MFU(tokensPerS, flopsPerToken, peakGFLOPS float64) float64 {
	if peakGFLOPS <= 0 {
		return math.NaN()
	}
	return tokensPerS * flopsPerToken / (peakGFLOPS * 1e9)
}

// stealTimes reads the steal and total jiffies of the first line of
// /proc/stat (ok false where there is none).
func stealTimes() (steal, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if i == 7 {
			steal = v
		}
		if i < 8 { // user nice system idle iowait irq softirq steal (guest time is inside user)
			total += v
		}
	}
	return steal, total, true
}

// stealSince is the fraction of CPU time stolen since the stealTimes
// reading (steal0, total0, ok0), or −1 when unknown.
func stealSince(steal0, total0 uint64, ok0 bool) float64 {
	steal1, total1, ok1 := stealTimes()
	if !ok0 || !ok1 || total1 <= total0 {
		return -1
	}
	return float64(steal1-steal0) / float64(total1-total0)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
