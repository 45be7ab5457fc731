package unwind

// ehFrameHdrFDEs reads the binary search table of .eh_frame_hdr (LSB Core,
// "The .eh_frame_hdr section") and returns the .eh_frame offsets of the
// FDEs it lists, in table order. hdr is the section's bytes at address
// hdrAddr; ehAddr and ehSize place .eh_frame. Entries outside .eh_frame
// are dropped; a malformed header gives nil.
func ehFrameHdrFDEs(hdr []byte, hdrAddr, ehAddr, ehSize uint64) []int {
	s := &frameSection{data: hdr, eh: true, addr: hdrAddr, dataAddr: hdrAddr}
	r := &buf{b: hdr}
	version, ptrEnc, countEnc, tableEnc := r.u8(), r.u8(), r.u8(), r.u8()
	if r.err != nil || version != 1 || countEnc == peOmit || tableEnc == peOmit {
		return nil
	}
	if _, err := s.readPtr(r, ptrEnc, true); err != nil {
		return nil
	}
	count, err := s.readPtr(r, countEnc, true)
	if err != nil || count > uint64(r.left())/2 {
		return nil
	}
	offs := make([]int, 0, count)
	for range count {
		s.readPtr(r, tableEnc, true) // the FDE's initial location
		addr, err := s.readPtr(r, tableEnc, true)
		if err != nil {
			return offs
		}
		if addr >= ehAddr && addr-ehAddr < ehSize {
			offs = append(offs, int(addr-ehAddr))
		}
	}
	return offs
}
