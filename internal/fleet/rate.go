package fleet

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rate is a number of events per second. The zero Rate means "never" for churn
// and "unlimited" for connection ramps; the flag parsers say which.
type Rate float64

// ParseRate parses "0", "N/s", "N/m" or "N/h" with N a non-negative decimal
// ("5/s", "0.5/s", "300/m"). A bare number is per second.
func ParseRate(s string) (Rate, error) {
	num, unit, hasUnit := strings.Cut(strings.TrimSpace(s), "/")
	per := time.Second
	if hasUnit {
		switch strings.TrimSpace(unit) {
		case "s", "sec", "1s":
			per = time.Second
		case "m", "min", "1m":
			per = time.Minute
		case "h", "1h":
			per = time.Hour
		default:
			return 0, fmt.Errorf("fleet: rate %q: unit must be s, m or h", s)
		}
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return 0, fmt.Errorf("fleet: rate %q: want a non-negative number like 5/s", s)
	}
	return Rate(n / per.Seconds()), nil
}

// Interval returns the time between two events, at least 1ns; 0 for the zero Rate.
func (r Rate) Interval() time.Duration {
	if r <= 0 {
		return 0
	}
	d := time.Duration(float64(time.Second) / float64(r))
	if d < 1 {
		d = 1
	}
	return d
}

// String formats the rate as events per second ("5/s"), or "0".
func (r Rate) String() string {
	if r <= 0 {
		return "0"
	}
	return strconv.FormatFloat(float64(r), 'g', -1, 64) + "/s"
}
