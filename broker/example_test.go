package broker_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/wire"
)

// A program submits a job and follows it to its end.
func ExampleBroker_Watch() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	b := broker.New(js, nil, broker.StreamOptions{}, nil) // an *s3.Client too, to Submit
	ctx := context.Background()
	err = b.Watch(ctx, "flowers-01", func(job wire.Job, st wire.JobStatus) error {
		if broker.HasStatus(st) {
			fmt.Printf("%s: %d/%d tasks done\n", job.State, st.Tasks.Done, st.Tasks.Total)
		} else {
			fmt.Println(job.State)
		}
		return nil
	})
	if errors.Is(err, broker.ErrJobNotFound) {
		fmt.Println("no such job")
	}
}
