package reputation_test

import (
	"fmt"
	"time"

	"github.com/meshtrain/meshtrain/reputation"
)

func Example() {
	book, err := reputation.New(reputation.DefaultParams())
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

	// An honest peer: merges applied, one clipped, one exchange timed out.
	for _, v := range []reputation.Verdict{reputation.Accepted, reputation.Accepted, reputation.Clipped, reputation.Timeout} {
		book.Record("honest", v, now)
	}
	// A peer that sends outliers, a few seconds apart.
	for i := range 9 {
		t := now.Add(time.Duration(i) * time.Second)
		if s := book.Record("attacker", reputation.Outlier, t); s != reputation.OK {
			fmt.Printf("outlier %d: %v\n", i+1, s)
		}
	}
	for _, p := range book.Peers(now.Add(10 * time.Second)) {
		fmt.Printf("%s %.2f %s %v", p.Peer, p.Score, p.StateName, p.Counts)
		if p.State == reputation.Banned {
			fmt.Print(" until ", p.BannedUntil.Format(time.TimeOnly))
		}
		fmt.Println()
	}
	// The ban runs its course; the peer starts over.
	fmt.Println(book.State("attacker", now.Add(2*time.Hour)), book.Score("attacker", now.Add(2*time.Hour)))
	// Output:
	// outlier 3: ignored
	// outlier 4: ignored
	// outlier 5: disconnected
	// outlier 6: disconnected
	// outlier 7: disconnected
	// outlier 8: disconnected
	// outlier 9: banned
	// attacker -44.38 banned map[outlier:9] until 13:00:08
	// honest 1.47 ok map[accepted:2 clipped:1 timeout:1]
	// ok 0
}
