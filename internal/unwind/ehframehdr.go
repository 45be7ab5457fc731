package unwind

// ehFrameHdrFDEs reads the binary search table of .eh_frame_hdr (LSB Core,
// "The .eh_frame_hdr section") and returns the .eh_frame offsets of the
// FDEs it lists, in table order. hdr is the section's bytes at address
// hdrAddr; ehAddr and ehSize place .eh_frame. Entries outside .eh_frame
// are dropped; a malformed header gives nil.
func ehFrameHdrFDEs(hdr []byte, hdrAddr, ehAddr, ehSize uint64) []int {
	_, offs := ehFrameHdrTable(hdr, hdrAddr, ehAddr, ehSize)
	return offs
}

// ehFrameHdrTable is ehFrameHdrFDEs with each FDE's initial location (an
// ELF address) beside its offset.
func ehFrameHdrTable(hdr []byte, hdrAddr, ehAddr, ehSize uint64) (starts []uint64, offs []int) {
	s := &frameSection{data: hdr, eh: true, addr: hdrAddr, dataAddr: hdrAddr}
	r := &buf{b: hdr}
	version, ptrEnc, countEnc, tableEnc := r.u8(), r.u8(), r.u8(), r.u8()
	if r.err != nil || version != 1 || countEnc == peOmit || tableEnc == peOmit {
		return nil, nil
	}
	if _, err := s.readPtr(r, ptrEnc, true); err != nil {
		return nil, nil
	}
	count, err := s.readPtr(r, countEnc, true)
	if err != nil || count > uint64(r.left())/2 {
		return nil, nil
	}
	starts, offs = make([]uint64, 0, count), make([]int, 0, count)
	for range count {
		start, err1 := s.readPtr(r, tableEnc, true) // the FDE's initial location
		addr, err := s.readPtr(r, tableEnc, true)
		if err1 != nil || err != nil {
			return starts, offs
		}
		if addr >= ehAddr && addr-ehAddr < ehSize {
			starts, offs = append(starts, start), append(offs, int(addr-ehAddr))
		}
	}
	return starts, offs
}
