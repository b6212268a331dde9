package store_test

import (
	"context"
	"fmt"

	"github.com/meshtrain/meshtrain/params"
	"github.com/meshtrain/meshtrain/store"
)

func ExampleStore() {
	ctx := context.Background()
	s := store.NewMemory() // store.Open(dataDir, store.Options{}) on disk
	defer s.Close()

	fp := params.Fingerprint{1}
	for step := int64(1); step <= 5; step++ {
		_, err := s.Save(ctx, &store.Checkpoint{Fingerprint: fp, Step: step * 100,
			Progress: params.Progress(step * 3200), Params: make([]float32, 1000)})
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	infos, _ := s.List()
	fmt.Println("kept", len(infos), "newest step", infos[0].Step)

	c, skipped, err := s.LoadLatest(ctx, fp)
	fmt.Println("resume from step", c.Step, "skipped", len(skipped), err)
	// Output:
	// kept 3 newest step 500
	// resume from step 500 skipped 0 <nil>
}
