package consumer

import "testing"

// Every slice put into a class has room for every request served from it.
func TestClassesCover(t *testing.T) {
	const max = 1 << 18
	minCap := map[int]int{}
	for c := 1; c <= max; c++ {
		k := putClass(c)
		if v, ok := minCap[k]; !ok || c < v {
			minCap[k] = c
		}
	}
	for n := 0; n <= max/2; n++ {
		k, alloc := classes(n)
		if alloc < n {
			t.Fatalf("classes(%d) alloc %d", n, alloc)
		}
		if putClass(alloc) != k {
			t.Fatalf("n=%d: class %d, alloc %d goes back to %d", n, k, alloc, putClass(alloc))
		}
		if v, ok := minCap[k]; ok && v < n {
			t.Fatalf("n=%d class %d: a slice of cap %d is put there", n, k, v)
		}
	}
}
