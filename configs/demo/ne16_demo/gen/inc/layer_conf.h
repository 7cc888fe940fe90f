#ifndef __LAYER_CONF_H__
#define __LAYER_CONF_H__

#define TEST_NAME "ne16_demo"
#define INPUT_HEIGHT (8)
#define INPUT_WIDTH (8)
#define INPUT_CHANNEL (24)
#define INPUT_SIGNED (0)
#define INPUT_BITS (8)
#define OUTPUT_HEIGHT (8)
#define OUTPUT_WIDTH (8)
#define OUTPUT_CHANNEL (40)
#define OUTPUT_SIGNED (0)
#define OUTPUT_BITS (8)
#define WEIGHT_HEIGHT (3)
#define WEIGHT_WIDTH (3)
#define WEIGHT_CHANNEL_IN (24)
#define WEIGHT_CHANNEL_OUT (40)
#define WEIGHT_BITS (8)
#define WEIGHT_OFFSET (-128)
#define SCALE_BITS (8)
#define BIAS_BITS (32)
#define PADDING_TOP (1)
#define PADDING_BOTTOM (1)
#define PADDING_LEFT (1)
#define PADDING_RIGHT (1)
#define PADDING_VALUE (0)
#define STRIDE_HEIGHT (1)
#define STRIDE_WIDTH (1)
#define GROUPS (1)
#define OUTSHIFT (18)
#define HAS_NORM_QUANT (1)
#define HAS_BIAS (1)
#define HAS_RELU (1)
#define WMEM_TCDM

#endif  // __LAYER_CONF_H__
