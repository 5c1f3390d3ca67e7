package splitbrain

import (
	"encoding/binary"
	"slices"
	"strconv"

	"golang.org/x/net/bpf"
)

// The kernel filter of the VRRP sockets. At 254 instances a node receives
// some 250 adverts a second, nearly all from members of its own
// deployment; reading and comparing each one in Go would cost a few
// percent of a core. So the socket carries a classic BPF program that the
// kernel runs on every advert: it drops an advert for a router id that is
// not this deployment's, and one that is exactly what a member sends (the
// version, the instance's VIPs in order, the authentication, and with
// unicast a configured peer as the source). Only the rest, the rare
// advert that differs, wakes the program, which decides in Go whether it
// is foreign (in Go the VIPs compare as a set, so a member that lists them
// in another order is no stranger). The filter only saves work; it never
// decides.

// maxFilterLen is the kernel's limit on a classic BPF program
// (BPF_MAXINSNS).
const maxFilterLen = 4096

// acceptLen is what the filter keeps of a packet it passes: all of it.
const acceptLen = 0xffff

// asm assembles a classic BPF program with forward jumps to labels. Every
// conditional jump is emitted as a short skip over an unconditional jump,
// whose offset has 32 bits, so no program outgrows the 8-bit offsets.
type asm struct {
	prog   []bpf.Instruction
	fixups map[int]string // index of a Jump -> its label
	labels map[string]int
}

func newAsm() *asm { return &asm{fixups: map[int]string{}, labels: map[string]int{}} }

func (a *asm) add(in ...bpf.Instruction) { a.prog = append(a.prog, in...) }

// label marks the next instruction.
func (a *asm) label(name string) { a.labels[name] = len(a.prog) }

// acceptUnless continues when A equals val, else jumps to "accept": the
// advert differs from a member's.
func (a *asm) acceptUnless(val uint32) {
	a.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: val, SkipTrue: 1})
	a.jump("accept")
}

// jump jumps to label.
func (a *asm) jump(label string) {
	a.fixups[len(a.prog)] = label
	a.add(bpf.Jump{})
}

// done resolves the labels.
func (a *asm) done() []bpf.Instruction {
	for i, l := range a.fixups {
		a.prog[i] = bpf.Jump{Skip: uint32(a.labels[l] - i - 1)}
	}
	return a.prog
}

// advertFilter returns the filter for the adverts of one family, or nil
// when the program would be too long (the socket then takes every
// advert). The kernel shows the filter of a raw IPv4 socket the IP header
// before the advert, and that of a raw IPv6 socket the advert alone.
//
// What every member's advert of the family shares is checked once: the
// version and type, the authentication, the length that the address count
// implies (so that no later load reads past the end, which would end the
// program with a drop), and with unicast over IPv4 the source. Then the
// router id picks the instance, whose VIPs are compared in order.
func advertFilter(expect map[key]expectation, v6 bool) []bpf.Instruction {
	order := familyKeys(expect, v6)
	if len(order) == 0 {
		return nil
	}
	first := expect[order[0]]
	for _, k := range order {
		if e := expect[k]; e.version != first.version || e.auth != first.auth || !slices.Equal(e.peers, first.peers) {
			return nil // never so: one setting each, for every instance
		}
	}
	a := newAsm()
	size := uint32(addrLen(v6))
	// load reads size bytes at off into the advert: after the IPv4
	// header, whose length is in X (and in M[0]), or from the start.
	load := func(off, size uint32) bpf.Instruction {
		if !v6 {
			return bpf.LoadIndirect{Off: off, Size: int(size)}
		}
		return bpf.LoadAbsolute{Off: off, Size: int(size)}
	}
	if !v6 {
		a.add(bpf.LoadMemShift{Off: 0}, bpf.TXA{}, bpf.StoreScratch{Src: bpf.RegA, N: 0})
	}
	if v6 && first.peers != nil {
		// The filter of an IPv6 socket cannot see the source, which
		// unicast must check: every advert on this deployment's router
		// ids, and every heartbeat, goes to the program.
		a.add(load(1, 1))
		a.add(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: vridHeartbeat, SkipTrue: 1})
		a.jump("accept")
		for _, k := range order {
			a.add(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(k.vrid), SkipTrue: 1})
			a.jump("accept")
		}
		a.add(bpf.RetConstant{Val: 0})
		a.label("accept")
		a.add(bpf.RetConstant{Val: acceptLen})
		return a.done()
	}
	if first.peers != nil {
		a.add(bpf.LoadAbsolute{Off: 12, Size: 4}) // the IPv4 source
		for _, p := range first.peers {
			a.add(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: binary.BigEndian.Uint32(p.AsSlice()), SkipTrue: 1})
			a.jump("source ok")
		}
		a.jump("accept")
		a.label("source ok")
	}
	// A heartbeat goes to the program.
	a.add(load(1, 1))
	a.add(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: vridHeartbeat, SkipTrue: 1})
	a.jump("accept")
	a.add(load(0, 1))
	a.acceptUnless(uint32(first.version<<4 | 1))
	auth := uint32(0)
	if first.version == 2 {
		auth = uint32(len(first.auth))
		a.add(load(4, 1))
		a.acceptUnless(vrrpAuthPass)
	}
	// The length the count implies, into M[1], against the real one.
	a.add(load(3, 1),
		bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: size},
		bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 8 + auth},
		bpf.StoreScratch{Src: bpf.RegA, N: 1},
		bpf.LoadExtension{Num: bpf.ExtLen})
	if !v6 {
		a.add(bpf.ALUOpX{Op: bpf.ALUOpSub})
	}
	a.add(bpf.LoadScratch{Dst: bpf.RegX, N: 1})
	a.add(bpf.JumpIfX{Cond: bpf.JumpEqual, SkipTrue: 1})
	a.jump("accept")
	if first.version == 2 {
		// The password follows the addresses: X = header + 8 + 4 × count.
		a.add(bpf.LoadScratch{Dst: bpf.RegX, N: 0}, load(3, 1),
			bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: 4},
			bpf.ALUOpConstant{Op: bpf.ALUOpAdd, Val: 8},
			bpf.ALUOpX{Op: bpf.ALUOpAdd},
			bpf.TAX{},
			bpf.LoadIndirect{Off: 0, Size: 4})
		a.acceptUnless(binary.BigEndian.Uint32(first.auth[0:4]))
		a.add(bpf.LoadIndirect{Off: 4, Size: 4})
		a.acceptUnless(binary.BigEndian.Uint32(first.auth[4:8]))
	}
	if !v6 {
		// X back to the header's length, for the loads after it: the
		// length check left the implied length there.
		a.add(bpf.LoadScratch{Dst: bpf.RegX, N: 0})
	}
	// One block per instance, each loading the router id and skipping
	// to the next block when it is not the instance's: a chain, with no
	// table of jumps in front.
	for i, k := range order {
		instanceBlock(a, expect[k], uint32(k.vrid), i, load)
	}
	// Not one of this deployment's router ids.
	a.label(instanceLabel(len(order)))
	a.add(bpf.RetConstant{Val: 0})
	a.label("accept")
	a.add(bpf.RetConstant{Val: acceptLen})
	prog := a.done()
	if len(prog) > maxFilterLen {
		return nil
	}
	return prog
}

func instanceLabel(i int) string { return "instance " + strconv.Itoa(i) }

// maxSkip is the longest skip of a conditional jump (8 bits).
const maxSkip = 255

// instanceBlock emits the i-th instance's block: the router id, then the
// VIP count and the VIPs in order against what a member sends. A block
// that fits the 8-bit skips of conditional jumps ends in an accept of
// its own, so each comparison is a load and one jump (at 254 instances
// of four IPv4 VIPs, 14 instructions an instance, 3,556 in all); a longer
// one jumps to the next block and to the program's accept with
// unconditional jumps.
func instanceBlock(a *asm, e expectation, vrid uint32, i int, load func(off, size uint32) bpf.Instruction) {
	type cmp struct{ off, size, val uint32 }
	cmps := []cmp{{3, 1, uint32(len(e.order))}}
	off := uint32(8)
	for _, v := range e.order {
		b := v.AsSlice()
		for w := 0; w < len(b); w += 4 {
			cmps = append(cmps, cmp{off, 4, binary.BigEndian.Uint32(b[w:])})
			off += 4
		}
	}
	a.label(instanceLabel(i))
	a.add(load(1, 1))
	// Short: the id's jump, a load and a jump per comparison, a drop and
	// an accept.
	n := 2 + 2*len(cmps) + 2
	if n-2 > maxSkip {
		a.add(bpf.JumpIf{Cond: bpf.JumpEqual, Val: vrid, SkipTrue: 1})
		a.jump(instanceLabel(i + 1))
		for _, c := range cmps {
			a.add(load(c.off, c.size))
			a.acceptUnless(c.val)
		}
		// A member's advert.
		a.add(bpf.RetConstant{Val: 0})
		return
	}
	// Skips count from the instruction after the jump: the next block
	// starts at n, this block's accept is at n-1.
	a.add(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: vrid, SkipTrue: uint8(n - 2)})
	for j, c := range cmps {
		at := 3 + 2*j // index of the jump in the block
		a.add(load(c.off, c.size),
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: c.val, SkipTrue: uint8(n - 1 - at - 1)})
	}
	// A member's advert; anything else the block looked at differs.
	a.add(bpf.RetConstant{Val: 0}, bpf.RetConstant{Val: acceptLen})
}

func addrLen(v6 bool) int {
	if v6 {
		return 16
	}
	return 4
}

// familyKeys returns the router ids of one family in instance order.
func familyKeys(expect map[key]expectation, v6 bool) []key {
	var ks []key
	for k := range expect {
		if k.v6 == v6 {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, func(a, b key) int { return a.vrid - b.vrid })
	return ks
}
