// Command kepoch is kepoch's demo and operations tool.
//
//	kepoch demo     start an embedded Kafka (franz-go's kfake), and show what
//	                kepoch does with it
//	kepoch epochs   print a partition's leader, leader epoch and the end offset
//	                of each recent leader epoch on a real cluster
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGTERM too: the demo's deferred clean-up (its temporary data
	// directory) runs only if the process ends through run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "demo":
		err = demo(ctx, args[1:], stdout)
	case "epochs":
		err = epochs(ctx, args[1:], stdout)
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "kepoch: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "kepoch %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: kepoch <command> [flags]

commands:
  demo     start an embedded Kafka and show kepoch at work (no setup needed)
  epochs   print a partition's leader epochs and where each one ends
           (-brokers host:port,... -topic T [-partition P])
`)
}
