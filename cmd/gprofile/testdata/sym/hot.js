// hot.js: a hot JavaScript function for the perf map test; node runs it
// with --perf-basic-prof for process.argv[2] seconds.
'use strict';

function gprofileHotLoop(n) {
  let acc = 1;
  for (let i = 0; i < n; i++) {
    acc = (acc * 1103515245 + i) | 0;
  }
  return acc;
}

const end = Date.now() + Number(process.argv[2] || 10) * 1000;
let sink = 0;
while (Date.now() < end) {
  sink ^= gprofileHotLoop(1000000);
}
console.log(sink === 42 ? '' : 'done');
