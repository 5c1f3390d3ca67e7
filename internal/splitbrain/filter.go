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
		// ids goes to the program.
		a.add(load(1, 1))
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
		a.add(bpf.LoadScratch{Dst: bpf.RegX, N: 0})
	}
	a.add(load(1, 1)) // the router id
	for i, k := range order {
		a.add(bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(k.vrid), SkipTrue: 1})
		a.jump(instanceLabel(i))
	}
	// Not one of this deployment's router ids.
	a.add(bpf.RetConstant{Val: 0})
	for i, k := range order {
		e := expect[k]
		a.label(instanceLabel(i))
		a.add(load(3, 1))
		a.acceptUnless(uint32(len(e.order)))
		off := uint32(8)
		for _, v := range e.order {
			b := v.AsSlice()
			for w := 0; w < len(b); w += 4 {
				a.add(load(off, 4))
				a.acceptUnless(binary.BigEndian.Uint32(b[w:]))
				off += 4
			}
		}
		// A member's advert.
		a.add(bpf.RetConstant{Val: 0})
	}
	a.label("accept")
	a.add(bpf.RetConstant{Val: acceptLen})
	prog := a.done()
	if len(prog) > maxFilterLen {
		return nil
	}
	return prog
}

func instanceLabel(i int) string { return "instance " + strconv.Itoa(i) }

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
