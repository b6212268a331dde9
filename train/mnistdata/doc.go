// Package mnistdata embeds the four gzip-compressed MNIST IDX files so that
// the meshtrain binary trains on MNIST with no module cache, download or data
// directory: a volunteer's machine or a FROM scratch image has all it needs.
//
// The files are the original distribution, byte for byte; package train
// decodes them.
//
//	f, err := mnistdata.Open(mnistdata.TrainImages)
//	if err != nil { ... }
//	defer f.Close()
//	images, err := train.ReadIDX(f, 0)
package mnistdata
