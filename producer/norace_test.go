//go:build !race

package producer_test

const raceEnabled = false
